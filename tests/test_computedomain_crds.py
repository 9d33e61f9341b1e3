"""Our ComputeDomain CRDs carry NVIDIA's schema (deployments/helm/dra-driver-nvidia-gpu/crds/ at v0.4.1 and
main 95932046)."""

from __future__ import annotations

from fakeplugin.apis import computedomain as api


def crd(plural: str) -> dict:
    (found,) = [c for c in api.crds() if c["metadata"]["name"] == f"{plural}.resource.nvidia.com"]
    return found


def test_both_crds_ship_as_package_data():
    assert sorted(c["metadata"]["name"] for c in api.crds()) == [
        "computedomaincliques.resource.nvidia.com",
        "computedomains.resource.nvidia.com",
    ]


def test_compute_domain():
    c = crd("computedomains")
    assert c["apiVersion"] == "apiextensions.k8s.io/v1" and c["kind"] == "CustomResourceDefinition"
    spec = c["spec"]
    assert spec["group"] == "resource.nvidia.com" and spec["scope"] == "Namespaced"
    assert spec["names"] == {
        "kind": "ComputeDomain",
        "listKind": "ComputeDomainList",
        "plural": "computedomains",
        "singular": "computedomain",
    }
    (version,) = spec["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    schema = version["schema"]["openAPIV3Schema"]
    cd_spec = schema["properties"]["spec"]
    assert cd_spec["required"] == ["channel"]
    assert cd_spec["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
    ]
    assert cd_spec["properties"]["numNodes"] | {"description": ""} == {
        "type": "integer",
        "default": 0,
        "minimum": 0,
        "description": "",
    }
    channel = cd_spec["properties"]["channel"]
    assert channel["required"] == ["resourceClaimTemplate"]
    mode = channel["properties"]["allocationMode"]
    assert (mode["type"], mode["default"], mode["enum"]) == ("string", "Single", ["All", "Single"])
    template = channel["properties"]["resourceClaimTemplate"]
    assert template["required"] == ["name"] and template["properties"]["name"] == {"type": "string"}

    cd_status = schema["properties"]["status"]
    assert cd_status["required"] == ["status"]
    assert cd_status["properties"]["status"] == {
        "type": "string",
        "default": "NotReady",
        "enum": ["Ready", "NotReady"],
    }
    nodes = cd_status["properties"]["nodes"]
    assert (nodes["x-kubernetes-list-type"], nodes["x-kubernetes-list-map-keys"]) == ("map", ["name"])
    node = nodes["items"]
    assert node["required"] == ["cliqueID", "ipAddress", "name"]
    assert set(node["properties"]) == {"cliqueID", "index", "ipAddress", "name", "status"}
    assert node["properties"]["index"]["type"] == "integer"
    assert (node["properties"]["status"]["default"], node["properties"]["status"]["enum"]) == (
        "NotReady",
        ["Ready", "NotReady"],
    )


def test_compute_domain_clique():
    c = crd("computedomaincliques")
    spec = c["spec"]
    assert spec["group"] == "resource.nvidia.com" and spec["scope"] == "Namespaced"
    assert (
        spec["names"]["kind"] == "ComputeDomainClique"
        and spec["names"]["listKind"] == "ComputeDomainCliqueList"
    )
    (version,) = spec["versions"]
    assert version["name"] == "v1beta1" and "subresources" not in version  # no status subresource
    props = version["schema"]["openAPIV3Schema"]["properties"]
    assert set(props) == {"apiVersion", "kind", "metadata", "daemons"}
    daemons = props["daemons"]
    assert (daemons["x-kubernetes-list-type"], daemons["x-kubernetes-list-map-keys"]) == ("map", ["nodeName"])
    item = daemons["items"]
    assert item["required"] == ["cliqueID", "ipAddress", "nodeName"]
    assert set(item["properties"]) == {"cliqueID", "index", "ipAddress", "nodeName", "status"}
    assert item["properties"]["status"]["default"] == "NotReady"
