"""Kubernetes resource quantities (k8s.io/apimachinery/pkg/api/resource): the one parser and the one
formatter fakeplugin has. The inventory (inventory.gpus) and opaque configs (prepare.opaqueconfig) read
quantities with `parse`/`value`, each with its own rules on top and its own messages; slices and `profiles`
write them with `format_binary_si`.

Ours, not the Kubernetes client's `kubernetes.utils.parse_quantity`: that one accepts what the API server
and NVIDIA's driver (Go's `resource.ParseQuantity`) refuse (`1K`, `NaN`, `Infinity`, `1_000`), computes in
28-digit Decimal (`99999999999999999999999999999Ki` comes out as 1.024E+32) and raises errors of its own,
where the driver's messages, which prepare.opaqueconfig repeats word for word, are Go's. The client has no
canonical formatter either (its `format_quantity` takes the suffix to use).
"""

from __future__ import annotations

import re
from fractions import Fraction

# Go's splitREString, as ErrFormatWrong quotes it.
FORMAT = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
_GRAMMAR = re.compile(r"([+-]?)(\d+\.?\d*|\.\d+)([eEinumkKMGTP]*[-+]?\d*)")
_EXPONENT = re.compile(r"[eE][-+]?\d+")
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES = ("", "k", "M", "G", "T", "P", "E")


class QuantityError(ValueError):
    """Not a quantity; the message is Go's ParseQuantity error (ErrFormatWrong or ErrSuffix)."""


def parse(text: str) -> Fraction:
    """The exact value of a quantity such as `23028Mi`, `1.5G`, `10m` or `1e3`. The caller trims spaces
    where its format allows them (the API's JSON decoder does)."""
    match = _GRAMMAR.fullmatch(text)
    if not match:
        raise QuantityError(f"quantities must match the regular expression '{FORMAT}'")
    sign, number, suffix = match.groups()
    if suffix in _BINARY:
        amount = Fraction(number) * 2 ** _BINARY[suffix]
    elif suffix in _DECIMAL:
        amount = Fraction(number) * Fraction(10) ** _DECIMAL[suffix]
    elif _EXPONENT.fullmatch(suffix):
        amount = Fraction(number) * Fraction(10) ** int(suffix[1:])
    else:
        raise QuantityError("unable to parse quantity's suffix")
    return -amount if sign == "-" else amount


def value(text: str) -> int:
    """Go's `Quantity.Value()`: the quantity as an integer, rounded up, away from zero."""
    amount = parse(text)
    whole = -(-abs(amount.numerator) // amount.denominator)  # ceil of the magnitude
    return -whole if amount < 0 else whole


def format_binary_si(n: int) -> str:
    """Canonical string of `resource.NewQuantity(n, BinarySI)`: the largest power-of-1024 suffix
    that keeps an integer (23028Mi, 15Gi, 1536); values below 1024 use DecimalSI as Kubernetes
    does (1000 → 1k)."""
    if n < 0:
        return "-" + format_binary_si(-n)
    base, suffixes = (1024, _BINARY_SUFFIXES) if n >= 1024 else (1000, _DECIMAL_SUFFIXES)
    exponent = 0
    while n and n % base == 0 and exponent < len(suffixes) - 1:
        n //= base
        exponent += 1
    return f"{n}{suffixes[exponent]}"
