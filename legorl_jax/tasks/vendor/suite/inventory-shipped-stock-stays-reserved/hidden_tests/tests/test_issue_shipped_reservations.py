from stockroom import OrderStatus, Warehouse, low_stock, stock_report


def stocked():
    wh = Warehouse()
    wh.receive("MUG-01", 10)
    wh.receive("TEE-M", 4)
    return wh


def test_shipping_does_not_change_availability():
    wh = stocked()
    wh.place_order("A100", {"MUG-01": 3})
    assert wh.available("MUG-01") == 7
    wh.ship_order("A100")
    assert (wh.on_hand("MUG-01"), wh.reserved("MUG-01"), wh.available("MUG-01")) == (7, 0, 7)


def test_stock_left_after_a_shipment_can_be_ordered():
    wh = stocked()
    wh.place_order("A1", {"MUG-01": 3})
    wh.ship_order("A1")
    wh.place_order("A2", {"MUG-01": 7})
    assert wh.available("MUG-01") == 0


def test_partial_shipment_consumes_only_what_shipped():
    wh = stocked()
    wh.place_order("A1", {"MUG-01": 3, "TEE-M": 2})
    wh.ship_order("A1", {"MUG-01": 1})
    assert wh.reserved("MUG-01") == 2 and wh.reserved("TEE-M") == 2
    assert wh.available("MUG-01") == 7 and wh.available("TEE-M") == 2
    assert wh.reservations.lines("A1") == {"MUG-01": 2, "TEE-M": 2}


def test_cancelling_after_a_partial_shipment_releases_the_rest_only():
    wh = stocked()
    wh.place_order("A1", {"MUG-01": 3})
    wh.ship_order("A1", {"MUG-01": 1})
    assert wh.cancel_order("A1") == {"MUG-01": 2}
    assert wh.orders["A1"].status is OrderStatus.CANCELLED
    assert (wh.on_hand("MUG-01"), wh.reserved("MUG-01"), wh.available("MUG-01")) == (9, 0, 9)


def test_reports_after_shipping():
    wh = stocked()
    wh.place_order("A1", {"TEE-M": 3})
    wh.place_order("A2", {"MUG-01": 2})
    wh.ship_order("A1")
    rows = {r.sku: (r.on_hand, r.reserved, r.available) for r in stock_report(wh)}
    assert rows == {"MUG-01": (10, 2, 8), "TEE-M": (1, 0, 1)}
    assert low_stock(wh, {"MUG-01": 8, "TEE-M": 0}) == ["MUG-01"]
    assert wh.reservations.orders() == ["A2"]


def test_shipped_stock_can_be_adjusted_down_to_what_is_left():
    wh = stocked()
    wh.place_order("A1", {"TEE-M": 2})
    wh.ship_order("A1")
    wh.adjust("TEE-M", -2, "water damage")
    assert wh.on_hand("TEE-M") == 0 and wh.available("TEE-M") == 0
