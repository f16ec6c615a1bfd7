import pytest

from stockroom import ReservationBook, StockLedger


def test_on_hand_is_the_sum_of_movements():
    ledger = StockLedger()
    ledger.record("MUG-01", 10, "receipt", "PO-1")
    ledger.record("MUG-01", -4, "shipment", "A1")
    ledger.record("MUG-01", -1, "adjustment", "broken")
    assert ledger.on_hand("MUG-01") == 5
    assert [m.kind for m in ledger.movements("MUG-01")] == ["receipt", "shipment", "adjustment"]
    assert ledger.skus() == ["MUG-01"]


def test_ledger_rejects_impossible_movements():
    ledger = StockLedger()
    with pytest.raises(ValueError, match="leave -2 on hand"):
        ledger.record("MUG-01", -2, "shipment")
    with pytest.raises(ValueError, match="receipt cannot have quantity -1"):
        ledger.record("MUG-01", -1, "receipt")
    with pytest.raises(ValueError, match="'theft'"):
        ledger.record("MUG-01", 1, "theft")
    with pytest.raises(ValueError, match="'mug'"):
        ledger.record("mug", 1, "receipt")
    assert ledger.skus() == []


def test_reservation_book_totals_per_sku():
    book = ReservationBook()
    book.reserve("A1", "MUG-01", 2)
    book.reserve("A2", "MUG-01", 3)
    book.reserve("A2", "TEE-M", 1)
    assert book.reserved("MUG-01") == 5
    assert book.lines("A2") == {"MUG-01": 3, "TEE-M": 1}
    assert book.release("A2") == {"MUG-01": 3, "TEE-M": 1}
    assert book.reserved("MUG-01") == 2
    assert book.orders() == ["A1"]
