"""AVL tree nodes augmented with the largest end point of their subtree.

The augmentation (`max_end`) lets a query skip every subtree whose intervals all end before the
query starts. Every structural change goes through `update` so the height and `max_end` stay right.
"""

from __future__ import annotations

from spans.interval import Interval


class Node:
    __slots__ = ("interval", "left", "right", "height", "max_end")

    def __init__(self, interval: Interval) -> None:
        self.interval = interval
        self.left: Node | None = None
        self.right: Node | None = None
        self.height = 1
        self.max_end = interval.end

    def update(self) -> None:
        self.height = 1 + max(height(self.left), height(self.right))
        self.max_end = self.interval.end
        for child in (self.left, self.right):
            if child is not None and child.max_end > self.max_end:
                self.max_end = child.max_end


def height(node: Node | None) -> int:
    return node.height if node is not None else 0


def balance_factor(node: Node) -> int:
    return height(node.left) - height(node.right)


def rotate_right(node: Node) -> Node:
    pivot = node.left
    node.left = pivot.right
    pivot.right = node
    node.update()
    pivot.update()
    return pivot


def rotate_left(node: Node) -> Node:
    pivot = node.right
    node.right = pivot.left
    pivot.left = node
    node.update()
    pivot.update()
    return pivot


def rebalance(node: Node) -> Node:
    node.update()
    factor = balance_factor(node)
    if factor > 1:
        if balance_factor(node.left) < 0:
            node.left = rotate_left(node.left)
        return rotate_right(node)
    if factor < -1:
        if balance_factor(node.right) > 0:
            node.right = rotate_right(node.right)
        return rotate_left(node)
    return node
