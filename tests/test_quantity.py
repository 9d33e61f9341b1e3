"""fakeplugin.quantity: apimachinery's quantity grammar and Go's errors, the value rounding, the canonical
form; and where the Kubernetes client's parser differs (why we keep ours)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from kubernetes.utils import parse_quantity as client_parse_quantity

from fakeplugin import quantity
from fakeplugin.inventory.gpus import parse_quantity as inventory_quantity

FORMAT_ERROR = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_ERROR = "unable to parse quantity's suffix"


@pytest.mark.parametrize(
    ("text", "exact"),
    [
        ("23028Mi", Fraction(23028 << 20)),
        ("1.5G", Fraction(1_500_000_000)),
        ("10m", Fraction(1, 100)),
        ("-1.5", Fraction(-3, 2)),
        (".5Ki", Fraction(512)),
        ("1e3", Fraction(1000)),
        ("2E-3", Fraction(2, 1000)),
        ("1E", Fraction(10**18)),  # exa, not an exponent
        ("99999999999999999999999999999Ki", Fraction(99999999999999999999999999999 * 1024)),
    ],
)
def test_parse_is_exact(text: str, exact: Fraction) -> None:
    assert quantity.parse(text) == exact


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", FORMAT_ERROR),
        ("Mi", FORMAT_ERROR),
        ("NaN", FORMAT_ERROR),
        ("Infinity", FORMAT_ERROR),
        ("1_000", FORMAT_ERROR),
        (" 3Ki ", FORMAT_ERROR),  # trimming is the caller's (the JSON decoder trims, the inventory does not)
        ("1K", SUFFIX_ERROR),
        ("1ki", SUFFIX_ERROR),
        ("16GB", FORMAT_ERROR),
        ("1Mi5", SUFFIX_ERROR),
    ],
)
def test_parse_refuses_with_gos_errors(text: str, error: str) -> None:
    with pytest.raises(quantity.QuantityError) as refused:
        quantity.parse(text)
    assert str(refused.value) == error


@pytest.mark.parametrize(
    ("text", "value"), [("0.5", 1), ("10m", 1), ("-1.5", -2), ("-0.5", -1), ("3Ki", 3072)]
)
def test_value_rounds_up_away_from_zero(text: str, value: int) -> None:
    assert quantity.value(text) == value


@pytest.mark.parametrize("text", ["1K", "NaN", "Infinity", "1_000"])
def test_the_clients_parser_accepts_what_go_refuses(text: str) -> None:
    client_parse_quantity(text)  # the reason fakeplugin.quantity exists: these must be errors
    with pytest.raises(quantity.QuantityError):
        quantity.parse(text)


def test_the_clients_parser_rounds_large_values() -> None:
    text = "99999999999999999999999999999Ki"
    assert client_parse_quantity(text) != 99999999999999999999999999999 * 1024
    assert quantity.value(text) == 99999999999999999999999999999 * 1024


@pytest.mark.parametrize("text", ["15Gi\n", "1.5Gi", "15G", "1Pi"])
def test_the_inventory_takes_whole_binary_quantities_up_to_ti_only(text: str) -> None:
    with pytest.raises(ValueError, match="is not a quantity like 23028Mi, 15Gi or a number of bytes"):
        inventory_quantity(text)
