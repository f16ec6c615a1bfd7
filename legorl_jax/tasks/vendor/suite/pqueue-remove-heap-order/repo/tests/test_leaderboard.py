from prioq import Leaderboard


def test_keeps_best_score_per_player():
    board = Leaderboard()
    assert board.submit("ann", 50)
    assert board.submit("bob", 70)
    assert not board.submit("ann", 40)
    assert board.submit("ann", 90)
    assert board.top(2) == [("ann", 90), ("bob", 70)]


def test_top_is_repeatable_and_keeps_tie_order():
    board = Leaderboard()
    for player in ["cy", "di", "ed"]:
        board.submit(player, 10)
    assert board.top(3) == [("cy", 10), ("di", 10), ("ed", 10)]
    assert board.top(1) == [("cy", 10)]
    assert board.top(3) == [("cy", 10), ("di", 10), ("ed", 10)]


def test_disqualified_player_leaves_the_board():
    board = Leaderboard()
    board.submit("ann", 1)
    board.submit("bob", 2)
    board.disqualify("bob")
    assert board.top(5) == [("ann", 1)]
    assert len(board) == 1
