from linediff import Opcode, opcodes


def test_equal_inputs_are_one_equal_opcode():
    assert opcodes(["a", "b"], ["a", "b"]) == [Opcode("equal", 0, 2, 0, 2)]


def test_replace_delete_insert():
    assert opcodes(["a", "b", "c"], ["a", "x", "c", "d"]) == [
        Opcode("equal", 0, 1, 0, 1),
        Opcode("replace", 1, 2, 1, 2),
        Opcode("equal", 2, 3, 2, 3),
        Opcode("insert", 3, 3, 3, 4),
    ]
    assert opcodes(["a", "b"], ["b"]) == [Opcode("delete", 0, 1, 0, 0), Opcode("equal", 1, 2, 0, 1)]


def test_opcodes_cover_both_sides():
    a, b = list("abcabba"), list("cbabac")
    ops = opcodes(a, b)
    assert ops[0].i1 == 0 and ops[-1].i2 == len(a) and ops[-1].j2 == len(b)
    assert sum(op.i2 - op.i1 for op in ops if op.tag == "equal") == 4  # LCS length
