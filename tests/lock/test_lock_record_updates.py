"""The updates of ``Lock.on_record`` that DynamoDB would refuse, on both DynamoDB backends: each
fails ``Lock.InvalidUpdate`` and frees the record at once, what DynamoDB accepts is written, a
write refused anyway is released without the update, a record too large to carry is released
typed, the validation refuses what DynamoDB Local refuses, and only a validation error of the
release is re-raised as an invalid update. (The fixture: ``test_lock_record.py``, whose group
this file is in.)"""

from __future__ import annotations

import json
import re

import jsonata
import pytest
from botocore.exceptions import ClientError

from locked_workflow.state_machines import lock_protocol as p
from locked_workflow.state_machines import record_protocol as r
from test_lock_record import LW, customer, records  # noqa: F401 - records: the stack's fixture


# --------------------------------------------------------------------------------------
# Updates DynamoDB refuses: Lock.InvalidUpdate, and the record free at once
# --------------------------------------------------------------------------------------


@pytest.fixture
def no_janitor(records):
    """No execution status events while the test runs: nothing but the run itself frees a lock."""
    records.cloud.events.emit_status_events = False
    try:
        yield records
    finally:
        records.cloud.events.emit_status_events = True


def run_updates(records, updates: list, **record) -> list:
    """Each update by the ``Custom`` work on a record of its own (all at once): ``[(customer,
    result)]``."""
    customers = [customer() for _ in updates]
    for c in customers:
        records.put(c, **record)
    arns = [records.start("Custom", {"customerId": c, "update": u}) for c, u in zip(customers, updates)]
    return [(c, records.cloud.wait_for(a, timeout=120)) for c, a in zip(customers, arns)]


def nested_maps(levels: int) -> dict:
    """A value ``levels`` maps deep around a string (levels + 1 levels with the string)."""
    value = {"S": "x"}
    for _ in range(levels):
        value = {"M": {"k": value}}
    return value


#: Updates DynamoDB would refuse at the release, each with the problem the run's cause names.
REFUSED_UPDATES = [
    ({"set": {"balance": {"N": "not-a-number"}}}, 'balance: N "not-a-number" is not a number'),
    ({"set": {"tags": {"SS": []}}}, "tags: SS must be a non-empty array (DynamoDB has no empty sets)"),
    ({"set": {"balance": {"N": "1"}}, "remove": ["balance"]}, "must not name an attribute twice"),
    ({"remove": ["temp", "temp"]}, "must not name an attribute twice"),
    ({"set": {"balance": {"N": "1" * 39}}}, "has more than 38 significant digits"),
    ({"set": {"balance": {"N": "1E126"}}}, "is out of range"),
    ({"set": {"balance": {"N": "1E-131"}}}, "is out of range"),
    ({"set": {"ids": {"NS": ["1", "1.0"]}}}, "NS holds a number twice"),
    ({"set": {"ids": {"NS": ["1", "x"]}}}, 'ids: NS member "x" is not a number'),
    ({"set": {"tags": {"SS": ["a", "a"]}}}, "SS holds a value twice"),
    ({"set": {"blob": {"B": "not base64!"}}}, "blob: B must be a base64 string"),
    ({"set": {"blobs": {"BS": []}}}, "BS must be a non-empty array"),
    ({"set": {"doc": {"M": {"a": {"L": [{"S": "ok"}, {"N": "x"}]}}}}}, 'doc.a[1]: N "x" is not a number'),
    ({"set": {"doc": {"M": {"a": {"SS": []}}}}}, "doc.a: SS must be a non-empty array"),
    ({"set": {"doc": nested_maps(32)}}, "nests deeper than 32 levels"),
    ({"set": {"gone": {"NULL": False}}}, "gone: NULL must be true"),
    ({"set": {"flag": {"BOOL": "yes"}}}, "flag: BOOL must be true or false"),
    ({"set": {"two": {"S": "a", "N": "1"}}}, "two: must have exactly one data type"),
    ({"set": {"none": {}}}, "none: must have exactly one data type (S, N, B, BOOL, NULL, M, L, SS, NS or BS), got: none"),
]


def test_an_update_dynamodb_would_refuse_fails_with_invalid_update_and_frees_the_record_at_once(no_janitor):
    records = no_janitor
    results = run_updates(records, [u for u, _ in REFUSED_UPDATES], balance=3, temp="t")
    for (update, problem), (c, result) in zip(REFUSED_UPDATES, results):
        assert (result.status, result.error) == ("FAILED", r.ERROR_INVALID_UPDATE), (update, result.error, result.cause)
        assert result.cause.startswith(f"{r.ERROR_INVALID_UPDATE}: the record update "), result.cause
        assert problem in result.cause, (update, result.cause)
        # free right after the run (no janitor: status events are off), unchanged, fence as acquired
        assert records.record(c) == {
            "customerId": {"S": c}, "balance": {"N": "3"}, "temp": {"S": "t"}, f"{LW}{p.FENCE}": {"N": "1"},
        }, update
    c = results[0][0]
    after = records.run("Increment", [{"customerId": c, "waitS": 0}])[0]  # the next holder goes at once
    assert after.status == "SUCCEEDED", (after.error, after.cause)
    assert records.record(c)["balance"] == {"N": "4"} and records.record(c)[f"{LW}{p.FENCE}"] == {"N": "2"}


def test_an_update_of_values_dynamodb_accepts_is_written(records):
    """The validation is no stricter than DynamoDB at its edges."""
    values = {
        "plus": {"N": "+1"}, "point": {"N": ".5"}, "trailing": {"N": "5."}, "exp": {"N": "1e5"},
        "zeros": {"N": "00012"}, "big": {"N": "9.9999999999999999999999999999999999999E+125"},
        "small": {"N": "-1E-130"}, "wide": {"N": "1" + "0" * 45}, "zero": {"N": "0E500"},
        "digits": {"N": "1" * 38}, "emptyString": {"S": ""}, "emptyBinary": {"B": ""}, "bin": {"B": "YWJj"},
        "set": {"SS": ["", "a"]}, "nums": {"NS": ["1", "2", "-0.5"]}, "bins": {"BS": ["YQ==", "Yg=="]},
        "nil": {"NULL": True}, "no": {"BOOL": False}, "list": {"L": []}, "map": {"M": {}},
        "deep": nested_maps(31), "mixed": {"L": [{"M": {"a": {"NS": ["1"]}}}, {"NULL": True}]},
    }
    results = run_updates(records, [{"set": values, "remove": ["temp"]}], balance=3, temp="t")
    c, result = results[0]
    assert result.status == "SUCCEEDED", (result.error, result.cause)
    item = records.record(c)
    assert set(values) <= set(item) and "temp" not in item and f"{LW}{p.OWNER}" not in item
    assert sorted(item["set"]["SS"]) == ["", "a"] and item["nil"] == {"NULL": True}


def test_a_write_dynamodb_refuses_anyway_is_released_without_the_update(no_janitor):
    """What the validation cannot check - the item's 400 KB limit depends on the stored record,
    which others may grow - DynamoDB refuses at the release: released at once without the
    update, Lock.InvalidUpdate. (The refusal is injected: a record the lock reads is at most
    RECORD_SIZE_LIMIT_KB, and an update is at most 256 KiB of state data.)"""
    from locked_workflow.testing.faults import Fault, dynamodb_faults

    records = no_janitor
    refused = Fault("UpdateItem", "ValidationException",
                    when=lambda params: "REMOVE" in params.get("UpdateExpression", "")
                    and "SET" in params.get("UpdateExpression", ""))  # the release with the update
    with dynamodb_faults(refused) as log:
        (c, result), = run_updates(records, [{"set": {"more": {"S": "y"}}}], big="x" * 1000)
    assert log.injected == 1
    assert (result.status, result.error) == ("FAILED", r.ERROR_INVALID_UPDATE), (result.error, result.cause)
    assert result.cause.startswith(f"{r.ERROR_INVALID_UPDATE}: DynamoDB refused the record update: ")
    assert records.record(c) == {"customerId": {"S": c}, "big": {"S": "x" * 1000}, f"{LW}{p.FENCE}": {"N": "1"}}


def test_a_record_too_large_to_carry_is_released_at_once_with_a_typed_error(no_janitor):
    """Issue 15.6: the acquire returned the whole record (ALL_NEW); over 256 KiB that failed the
    state with States.DataLimitExceeded, which no Catch handles: locked until the janitor, the
    update never applied. Now the acquire returns the lock's attributes and its write units;
    a record over RECORD_SIZE_LIMIT_KB is not read: released at once, Lock.RecordTooLarge."""
    records = no_janitor
    stored = "x" * 300_000
    (c, result), = run_updates(records, [{"set": {"balance": {"N": "1"}}}], big=stored)
    assert (result.status, result.error) == ("FAILED", r.ERROR_RECORD_TOO_LARGE), (result.error, result.cause)
    size = re.search(rf"is (\d+) KB, over the {r.RECORD_SIZE_LIMIT_KB} KB", result.cause)
    assert size and 293 <= int(size.group(1)) <= 300, result.cause  # 300,000 bytes and the names
    assert records.record(c) == {"customerId": {"S": c}, "big": {"S": stored}, f"{LW}{p.FENCE}": {"N": "1"}}
    # the next run is refused the same way at once (no janitor, no lease to wait out) ...
    again = records.run("Custom", [{"customerId": c, "update": {}}], timeout=120)[0]
    assert (again.status, again.error) == ("FAILED", r.ERROR_RECORD_TOO_LARGE)
    # ... and a record within the limit is read into $lock.item and updated
    (small, ok), = run_updates(records, [{"set": {"balance": {"N": "7"}}}], big="x" * (120 * 1000))
    assert ok.status == "SUCCEEDED", (ok.error, ok.cause)
    assert records.record(small)["balance"] == {"N": "7"}


@pytest.mark.parametrize("records", ["dynamodb-local"], indirect=True)
def test_the_validation_refuses_what_dynamodb_local_refuses(records):
    """Each value as the release would send it, written straight to DynamoDB Local (the
    reference) and checked by the release's own validation: both refuse, or neither."""
    check = jsonata.Jsonata(
        "( $u := $; $set := $exists($u.set) ? $u.set : {}; $remove := $exists($u.remove) ? $u.remove : []; "
        "$names := $append($keys($set), $remove); "
        + r.update_problem_expression(key_attribute="customerId") + "; $problem )"
    )
    ddb, table = records.cloud.dynamodb, records.table("Customers")
    sent = {}

    def as_given(request, **_):  # the JSON as Step Functions passes it (botocore would encode B)
        body = json.loads(request.body)
        body["ExpressionAttributeValues"] = sent["values"]
        request.body = json.dumps(body).encode()
        request.headers["Content-Length"] = str(len(request.body))

    def dynamodb_refuses(value) -> bool:
        sent["values"] = {":v": value}
        try:
            ddb.update_item(
                TableName=table, Key={"customerId": {"S": "validation-reference"}}, UpdateExpression="SET #a = :v",
                ExpressionAttributeNames={"#a": "a"}, ExpressionAttributeValues={":v": {"S": "placeholder"}},
            )
        except ClientError:
            return True
        return False

    numbers = ["1", "+1", "-1", ".5", "5.", "1e5", "1E+5", "1e-5", "-0", "00012", "1.500", "0E500", "0.000",
               "1" * 38, "1" * 39, "1" + "0" * 45, "1." + "0" * 40 + "1", "1E126", "10E125", "1E-130", "1E-131",
               "0.1E-129", "0.01E-129", "9.9999999999999999999999999999999999999E+125", "1E0000000000000000000000001",
               "0E-99999999999", "not-a-number", "", "-", "1e", "e5", "1.2.3", "+-1", " 1", "1 ", "1\n", "0x10", "NaN"]
    values = [{"N": n} for n in numbers] + [
        {"SS": []}, {"SS": ["a", "a"]}, {"SS": [""]}, {"NS": ["1", "1.0"]}, {"NS": ["-0", "0"]}, {"NS": ["1", "2"]},
        {"NS": ["x"]}, {"BS": ["YQ==", "YQ=="]}, {"BS": []}, {"BS": ["YQ==", "Yg=="]}, {"B": ""}, {"B": "YWJj"},
        {"B": "!!"}, {"B": "YQ="}, {"B": "YW Jj"}, {"NULL": False}, {"NULL": True}, {"BOOL": False},
        {"S": "a", "N": "1"}, {}, {"S": ""}, {"L": [{"N": "x"}]}, {"M": {"k": {"SS": []}}}, {"M": {"": {"S": "x"}}},
        {"L": []}, {"M": {}}, nested_maps(31), nested_maps(32),
    ]
    ddb.meta.events.register("before-send.dynamodb.UpdateItem", as_given, unique_id="as-given")
    try:
        verdicts = [(value, bool(check.evaluate({"set": {"a": value}})), dynamodb_refuses(value)) for value in values]
    finally:
        ddb.meta.events.unregister("before-send.dynamodb.UpdateItem", unique_id="as-given")

    disagree = [(json.dumps(v)[:80], mine, theirs) for v, mine, theirs in verdicts if mine != theirs]
    assert disagree == [], disagree
    assert sum(theirs for _, _, theirs in verdicts) > 20  # the cases do exercise refusals


@pytest.mark.parametrize(
    "error, cause, reraised",
    [
        ("DynamoDB.ValidationException", "Item size has exceeded the maximum allowed size", r.ERROR_INVALID_UPDATE),
        # the SDK's generic name, as the optimized integration may report a ValidationException
        ("DynamoDB.AmazonDynamoDBException", "Too big (Service: AmazonDynamoDBv2; Status Code: 400; "
         "Error Code: ValidationException; Request ID: x)", r.ERROR_INVALID_UPDATE),
        ("DynamoDB.AmazonDynamoDBException", "Busy (Service: AmazonDynamoDBv2; Status Code: 400; "
         "Error Code: ThrottlingException; Request ID: x)", "DynamoDB.AmazonDynamoDBException"),
    ],
    ids=["validation", "generic-validation", "generic-other"],
)
def test_a_refused_release_write_is_reraised_as_invalid_update_only_for_a_validation_error(error, cause, reraised):
    expression = jsonata.Jsonata(r.refused_update_outputs_expression())
    expression.assign("states", {"errorOutput": {"Error": error, "Cause": cause}})

    raised = expression.evaluate(None)

    assert raised["Error"] == reraised
    if reraised == r.ERROR_INVALID_UPDATE:
        assert raised["Cause"] == f"{r.ERROR_INVALID_UPDATE}: DynamoDB refused the record update: {cause}"
    else:
        assert raised == {"Error": error, "Cause": cause}  # released, then re-raised as it was
