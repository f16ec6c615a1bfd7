from typeahead import CompletionIndex


def streets():
    index = CompletionIndex()
    index.add("Hauptstraße", weight=5)
    index.add("HAUPTSTRASSE 12", weight=2)
    index.add("Fußballplatz", weight=1)
    return index


def test_sharp_s_prefix_finds_phrases_spelled_either_way():
    index = streets()
    assert index.complete("hauptstraß") == ["Hauptstraße", "HAUPTSTRASSE 12"]
    assert index.complete("Fuß") == ["Fußballplatz"]


def test_uppercase_ss_prefix_still_matches_sharp_s():
    assert streets().complete("HAUPTSTRASS") == ["Hauptstraße", "HAUPTSTRASSE 12"]


def test_greek_final_sigma_in_prefix_matches():
    index = CompletionIndex()
    index.add("ΟΔΟΣ ΣΤΑΔΙΟΥ")
    assert index.complete("οδος") == ["ΟΔΟΣ ΣΤΑΔΙΟΥ"]
    assert index.complete("ΟΔΟΣ σ") == ["ΟΔΟΣ ΣΤΑΔΙΟΥ"]


def test_ligature_in_prefix_is_folded():
    index = CompletionIndex()
    index.add("office hours")
    assert index.complete("o\ufb03") == ["office hours"]
