"""Kueue's CRDs and webhook configurations from its module, for a manager served by URL on loopback (pure
but for reading the module's files).

What Kueue's kustomization (config/default) does to them, done the same way, except that every webhook
is reached at `https://<host>:<port><path>` with our CA instead of through the `kueue-webhook-service`
Service (a Service's endpoints cannot be a loopback address):
- the CRDs of `config/components/crd/kustomization.yaml`, with the conversion webhooks its patches add;
- `config/components/webhook/manifests.yaml`, named `kueue-…` (config/default's namePrefix), with the
  namespaceSelector its kustomization gives the job and pod webhooks (kube-system and kueue-system left
  alone).
"""

from __future__ import annotations

import base64
import copy
import re
from pathlib import Path
from typing import Any

import yaml

NAME_PREFIX = "kueue-"  # config/default/kustomization.yaml namePrefix
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # the CRDs are megabytes of YAML
_TARGET = re.compile(r"webhooks\.\[name=([^\]]+)\]")


class KueueModuleError(RuntimeError):
    """The Kueue module's files are not where or what v0.19 has."""


def _load_all(path: Path) -> list[dict[str, Any]]:
    try:
        return [d for d in yaml.load_all(path.read_text(), Loader=_LOADER) if d]
    except (OSError, yaml.YAMLError) as exc:
        raise KueueModuleError(f"{path}: cannot read Kueue's manifest: {exc}") from None


def _one(path: Path) -> dict[str, Any]:
    docs = _load_all(path)
    if len(docs) != 1:
        raise KueueModuleError(f"{path}: expected one document, found {len(docs)}")
    return docs[0]


def _url(base: str, path: str) -> str:
    return base.rstrip("/") + path


def crds(module: Path, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The CRDs, conversion webhooks at `base_url` + their path."""
    crd_dir = module / "config" / "components" / "crd"
    kustomization = _one(crd_dir / "kustomization.yaml")
    objects = [_one(crd_dir / r) for r in kustomization.get("resources") or []]
    if not objects:
        raise KueueModuleError(f"{crd_dir / 'kustomization.yaml'}: lists no CRDs")
    by_name = {o["metadata"]["name"]: o for o in objects}
    ca = base64.b64encode(ca_pem).decode()
    for entry in kustomization.get("patches") or []:
        patch = _one(crd_dir / entry["path"])
        conversion = copy.deepcopy(patch["spec"]["conversion"])
        client = conversion["webhook"]["clientConfig"]
        client["url"] = _url(base_url, client.pop("service")["path"])
        client["caBundle"] = ca
        by_name[patch["metadata"]["name"]]["spec"]["conversion"] = conversion
    return objects


def webhook_configurations(module: Path, base_url: str, ca_pem: bytes) -> list[dict[str, Any]]:
    """The mutating and validating webhook configurations, every webhook at `base_url` + its path."""
    webhook_dir = module / "config" / "components" / "webhook"
    configs = _load_all(webhook_dir / "manifests.yaml")
    selectors = _namespace_selectors(_one(webhook_dir / "kustomization.yaml"))
    ca = base64.b64encode(ca_pem).decode()
    for config in configs:
        config["metadata"]["name"] = NAME_PREFIX + config["metadata"]["name"]
        for hook in config.get("webhooks") or []:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": _url(base_url, path), "caBundle": ca}
            if hook["name"] in selectors:
                hook["namespaceSelector"] = copy.deepcopy(selectors[hook["name"]])
    return configs


def _namespace_selectors(kustomization: dict[str, Any]) -> dict[str, Any]:
    """Webhook name → namespaceSelector, as the kustomization's patches and replacements set them."""
    selectors: dict[str, Any] = {}
    for entry in kustomization.get("patches") or []:
        for hook in yaml.safe_load(entry["patch"]).get("webhooks") or []:
            if "namespaceSelector" in hook:
                selectors[hook["name"]] = hook["namespaceSelector"]
    for replacement in kustomization.get("replacements") or []:
        source = _TARGET.search(replacement["source"]["fieldPath"])
        if not source or source.group(1) not in selectors:
            continue
        for target in replacement.get("targets") or []:
            for field_path in target.get("fieldPaths") or []:
                if m := _TARGET.search(field_path):
                    selectors[m.group(1)] = selectors[source.group(1)]
    return selectors
