"""Building the node tree from tokens; block tags are matched with a stack."""

from __future__ import annotations

import re

from stencil.errors import TemplateSyntaxError
from stencil.expressions import compile_expression
from stencil.lexer import Token, tokenize
from stencil.nodes import For, If, Output, Text

_FOR = re.compile(r"^for\s+([A-Za-z_][A-Za-z0-9_]*)\s+in\s+(.+)$", re.S)


def parse_template(source: str) -> list:
    root: list = []
    # Each frame: (node, the list currently being filled, tag that opened it, line).
    stack: list[tuple[object, list, str, int]] = []
    current = root
    for tok in tokenize(source):
        if tok.kind == "text":
            current.append(Text(tok.value))
        elif tok.kind == "output":
            current.append(Output(compile_expression(tok.value, tok.line)))
        else:
            current = _tag(tok, stack, current)
    if stack:
        _, _, tag, line = stack[-1]
        raise TemplateSyntaxError(f"{{% {tag} %}} is never closed", line)
    return root


def _tag(tok: Token, stack: list, current: list) -> list:
    word, _, rest = tok.value.partition(" ")
    rest = rest.strip()
    if word == "if":
        node = If()
        body: list = []
        node.branches.append((compile_expression(rest, tok.line), body))
        current.append(node)
        stack.append((node, current, "if", tok.line))
        return body
    if word == "for":
        m = _FOR.match(tok.value)
        if not m:
            raise TemplateSyntaxError(f"malformed for tag {tok.value!r}", tok.line)
        node = For(m.group(1), compile_expression(m.group(2), tok.line))
        current.append(node)
        stack.append((node, current, "for", tok.line))
        return node.body
    if word in ("elif", "else", "endif", "endfor"):
        if not stack:
            raise TemplateSyntaxError(f"{{% {word} %}} without an opening tag", tok.line)
        node, parent, opener, _ = stack[-1]
        if word == "elif":
            if opener != "if" or node.otherwise:
                raise TemplateSyntaxError("{% elif %} outside an if block or after else", tok.line)
            body = []
            node.branches.append((compile_expression(rest, tok.line), body))
            return body
        if word == "else":
            return node.otherwise
        if word != "end" + opener:
            raise TemplateSyntaxError(f"{{% {word} %}} closes {{% {opener} %}}", tok.line)
        stack.pop()
        return parent
    raise TemplateSyntaxError(f"unknown tag {word!r}", tok.line)
