"""Plain decimal text: what ports, task indexes, versions and lengths must be."""

import pytest

from airflow_tfk.protocol.digits import MAX_DIGITS, is_plain_int, plain_int


@pytest.mark.parametrize(
    "text, value", [("0", 0), ("7", 7), ("0042", 42), ("9" * MAX_DIGITS, int("9" * MAX_DIGITS))]
)
def test_plain_digits_are_read(text, value):
    assert plain_int(text) == value and is_plain_int(text)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "²",
        "٣",
        "1²",
        "1_0",
        " 1",
        "1 ",
        "+1",
        "-1",
        "1.0",
        "0x10",
        "9" * (MAX_DIGITS + 1),
        "9" * 5000,
        None,
        3,
        b"3",
    ],
)
def test_anything_else_is_not(text):
    # (each of these is a str.isdigit() or an int() that says yes, or a crash)
    assert plain_int(text) is None and not is_plain_int(text)
