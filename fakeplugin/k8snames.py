"""Kubernetes name rules (RFC 1123), shared by every check of a name that ends up in an object or a path."""

from __future__ import annotations

import re

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
DNS_LABEL = re.compile(_LABEL)
DNS_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
MAX_DNS_LABEL = 63
MAX_DNS_SUBDOMAIN = 253


def is_dns_subdomain(value: str, max_length: int = MAX_DNS_SUBDOMAIN) -> bool:
    return len(value) <= max_length and DNS_SUBDOMAIN.fullmatch(value) is not None
