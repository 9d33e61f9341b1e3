"""The version-neutral middle of NodePrepareResources / NodeUnprepareResources.

Wire claims in, exactly one answer per requested claim UID out: claims missing a required field get an
error of their own, the rest go to the core (in the call's own worker thread: the core blocks on API calls
and the node lock), and a claim the core did not answer gets an error rather than no entry (a missing
entry fails the whole pod in the kubelet).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from types import ModuleType
from typing import Any, Protocol, TypeVar

import grpc

from fakeplugin.model import ClaimRef, PreparedDevice, PrepareResult
from fakeplugin.runtime.driver import Claims
from fakeplugin.server import metrics

log = logging.getLogger(__name__)

T = TypeVar("T")

REQUIRED_FIELDS = ("namespace", "uid", "name")


class WireClaim(Protocol):
    """The Claim message; identical in v1 and v1beta1."""

    namespace: str
    uid: str
    name: str


def split_claims(claims: Iterable[WireClaim]) -> tuple[list[ClaimRef], dict[str, str]]:
    """Claims the core can work on, and an error per claim with an empty required field (keyed by its UID,
    which may be the empty one)."""
    refs: list[ClaimRef] = []
    invalid: dict[str, str] = {}
    for claim in claims:
        missing = [field for field in REQUIRED_FIELDS if not getattr(claim, field)]
        if missing:
            invalid[claim.uid] = (
                f"claim namespace={claim.namespace!r} name={claim.name!r} uid={claim.uid!r}: "
                f"required field {', '.join(missing)} is empty"
            )
        else:
            refs.append(ClaimRef(namespace=claim.namespace, uid=claim.uid, name=claim.name))
    return refs, invalid


def prepare(driver: Claims, claims: Iterable[WireClaim]) -> dict[str, PrepareResult]:
    return _answer_each(driver.prepare, claims, lambda error: PrepareResult(error=error), "prepare")


def unprepare(driver: Claims, claims: Iterable[WireClaim]) -> dict[str, str]:
    return _answer_each(driver.unprepare, claims, lambda error: error, "unprepare")


def _answer_each(
    core: Callable[[Sequence[ClaimRef]], dict[str, T]],
    claims: Iterable[WireClaim],
    failed: Callable[[str], T],
    operation: str,
) -> dict[str, T]:
    refs, invalid = split_claims(claims)
    answers = {uid: failed(error) for uid, error in invalid.items()}
    if not refs:
        return answers
    try:
        returned = core(refs)
    except Exception as exc:
        log.exception("%s of %s failed", operation, ", ".join(map(str, refs)))
        return answers | {ref.uid: failed(f"{operation} resource claims: {exc}") for ref in refs}
    unknown = returned.keys() - {ref.uid for ref in refs}
    if unknown:
        # The kubelet rejects a response naming a claim it did not ask about.
        log.warning("%s: dropping answers for claims not in the request: %s", operation, sorted(unknown))
    for ref in refs:
        if ref.uid in returned:
            answers[ref.uid] = returned[ref.uid]
        else:
            answers[ref.uid] = failed(f"driver returned no result for claim {ref}")
    return answers


class DRAPluginAdapter:
    """DRAPlugin over the core for one wire version: the version's messages (`pb`) and its Device
    conversion (`device`) are all that differ between v1 and v1beta1."""

    pb: ModuleType  # the version's generated api_pb2

    def __init__(self, driver: Claims, driver_name: str) -> None:
        self._driver = driver
        self._driver_name = driver_name  # metrics label

    def device(self, d: PreparedDevice) -> Any:
        raise NotImplementedError

    def NodePrepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        with metrics.request(self._driver_name, "NodePrepareResources"):
            results = prepare(self._driver, request.claims)
        failed = sum(1 for result in results.values() if result.error)
        metrics.prepare_errors(self._driver_name, failed)
        return self.pb.NodePrepareResourcesResponse(
            claims={uid: self._prepare_response(result) for uid, result in results.items()}
        )

    def NodeUnprepareResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        with metrics.request(self._driver_name, "NodeUnprepareResources"):
            errors = unprepare(self._driver, request.claims)
        failed = sum(1 for error in errors.values() if error)
        metrics.unprepare_errors(self._driver_name, failed)
        return self.pb.NodeUnprepareResourcesResponse(
            claims={uid: self.pb.NodeUnprepareResourceResponse(error=error) for uid, error in errors.items()}
        )

    def _prepare_response(self, result: PrepareResult) -> Any:
        if result.error:  # the kubelet ignores devices of a failed claim: send none
            return self.pb.NodePrepareResourceResponse(error=result.error)
        return self.pb.NodePrepareResourceResponse(devices=[self.device(d) for d in result.devices])
