from .conftest import run, staff


async def test_read_verb_end_to_end(shop, dispatcher):
    env = await run(dispatcher, staff(shop, "read_only"), "customer.context", {"customer_id": "cust_1"})
    assert env["ok"], env
    assert env["result"]["entity_id"] == "cust_1"
    assert env["result"]["data"]["order_count"] == 2
