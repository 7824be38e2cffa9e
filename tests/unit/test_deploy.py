"""Deployment files: every Kubernetes manifest validates against the Kubernetes schemas (strict), the
kustomization lists them all and sets the one image, RBAC grants only what the director needs, and
compose has its services, builds the image once and checks the director's health."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
KUBERNETES = DEPLOY / "kubernetes"
WORKERS = DEPLOY / "kubernetes-workers"
MANIFESTS = sorted(path for path in KUBERNETES.glob("*.yaml") if path.name != "kustomization.yaml")
WORKER_MANIFESTS = sorted(path for path in WORKERS.glob("*.yaml") if path.name != "kustomization.yaml")


def documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


@pytest.mark.parametrize("path", MANIFESTS + WORKER_MANIFESTS, ids=lambda path: path.name)
def test_manifest_validates_against_kubernetes_schemas(path: Path) -> None:
    for document in documents(path):
        kubernetes_validate.validate(document, "1.30", strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    assert sorted(kustomization["resources"]) == sorted(path.name for path in MANIFESTS)


def by_kind(kind: str) -> list[dict[str, Any]]:
    return [doc for path in MANIFESTS for doc in documents(path) if doc["kind"] == kind]


def test_role_grants_only_what_the_director_needs() -> None:
    [role] = by_kind("Role")
    grants = {(tuple(rule["apiGroups"]), tuple(rule["resources"])): set(rule["verbs"]) for rule in role["rules"]}
    assert grants == {
        (("",), ("pods",)): {"create", "delete", "get", "list", "watch"},
        (("coordination.k8s.io",), ("leases",)): {"get", "create", "update"},
        (("apps",), ("deployments",)): {"get"},
    }
    deployments_rule = next(rule for rule in role["rules"] if rule["resources"] == ["deployments"])
    assert deployments_rule["resourceNames"] == ["baton-director"]


def test_deployments_replicas_probes_and_security() -> None:
    deployments = {doc["metadata"]["name"]: doc for doc in by_kind("Deployment")}
    assert deployments["baton-api"]["spec"]["replicas"] == 3
    assert deployments["baton-director"]["spec"]["replicas"] == 2
    api = deployments["baton-api"]["spec"]["template"]["spec"]["containers"][0]
    assert api["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert api["livenessProbe"]["httpGet"]["path"] == "/health"
    director = deployments["baton-director"]["spec"]["template"]["spec"]
    assert director["serviceAccountName"] == "baton-director"
    assert director["containers"][0]["args"] == ["director", "--runner", "kubernetes"]
    assert director["containers"][0]["readinessProbe"]["exec"]["command"] == ["baton", "probe", "director"]
    assert director["containers"][0]["livenessProbe"]["exec"]["command"] == ["baton", "probe", "director", "--live"]
    for deployment in deployments.values():
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsNonRoot"] is True
        for container in pod["containers"]:
            context = container["securityContext"]
            assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False


def test_the_image_is_set_once_by_kustomize() -> None:
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    [image] = kustomization["images"]
    assert image["name"] == "baton" and image["newName"] and image["newTag"]
    for deployment in by_kind("Deployment"):
        assert {c["image"] for c in deployment["spec"]["template"]["spec"]["containers"]} == {"baton"}
    [replacement] = kustomization["replacements"]
    assert replacement["targets"][0]["fieldPaths"] == ["data.BATON_K8S_IMAGE"]


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_kustomize_build_puts_the_image_everywhere() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(KUBERNETES)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    docs = [doc for doc in yaml.safe_load_all(built) if doc]
    kustomization = yaml.safe_load((KUBERNETES / "kustomization.yaml").read_text())
    expected = "{newName}:{newTag}".format(**kustomization["images"][0])
    images = {
        c["image"] for doc in docs if doc["kind"] == "Deployment" for c in doc["spec"]["template"]["spec"]["containers"]
    }
    [config] = [doc for doc in docs if doc["kind"] == "ConfigMap"]
    assert images == {expected} and config["data"]["BATON_K8S_IMAGE"] == expected


def test_workers_overlay_replaces_the_director_with_workers_that_need_no_api() -> None:
    kustomization = yaml.safe_load((WORKERS / "kustomization.yaml").read_text())
    assert kustomization["resources"] == ["../kubernetes", "worker.yaml", "hpa.yaml"]
    deleted = {(yaml.safe_load(patch["patch"])["kind"]) for patch in kustomization["patches"]}
    assert deleted == {"Deployment", "ServiceAccount", "Role", "RoleBinding"}  # the director's, all of them
    docs = [doc for path in WORKER_MANIFESTS for doc in documents(path)]
    [deployment] = [doc for doc in docs if doc["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 3 and pod["automountServiceAccountToken"] is False
    [container] = pod["containers"]
    assert container["args"] == ["worker"] and container["image"] == "baton"
    assert container["readinessProbe"]["exec"]["command"] == ["baton", "probe", "worker"]
    assert container["livenessProbe"]["exec"]["command"] == ["baton", "probe", "worker", "--live"]
    [hpa] = [doc for doc in docs if doc["kind"] == "HorizontalPodAutoscaler"]
    assert hpa["spec"]["scaleTargetRef"]["name"] == "baton-worker"


@pytest.mark.skipif(shutil.which("kubectl") is None, reason="kubectl not installed")
def test_workers_overlay_builds_without_the_director() -> None:
    built = subprocess.run(
        ["kubectl", "kustomize", str(WORKERS)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    names = {(doc["kind"], doc["metadata"]["name"]) for doc in yaml.safe_load_all(built) if doc}
    assert ("Deployment", "baton-worker") in names and ("Deployment", "baton-api") in names
    assert not any(name == "baton-director" for _kind, name in names)


def test_scheduler_pod_manifest_validates_too(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("POD_NAME", raising=False)
    from kubernetes import client

    from baton.control.kubernetes import KubernetesRunner
    from baton.core.model import SchedulerSpec, SchedulerType
    from baton.core.settings import Settings

    runner = KubernetesRunner(client.ApiClient(), Settings(k8s_owner_deployment=None), "baton")
    manifest = runner.pod_manifest(SchedulerSpec("Acme.Corp_", SchedulerType.NORMALIZER))
    kubernetes_validate.validate(manifest, "1.30", strict=True)


def test_compose_file_has_the_services_and_replicas() -> None:
    compose = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "rabbitmq", "api", "director"}
    assert services["api"]["deploy"]["replicas"] == 3
    assert services["api"]["command"] == ["serve", "--no-director"]
    assert services["director"]["command"][:1] == ["director"]
    assert services["api"]["environment"]["BATON_DATABASE_URL"].startswith("postgresql+psycopg://")
    # Built once (by api); the director reuses the tag; both check their health with `baton probe`.
    assert [name for name, service in services.items() if "build" in service] == ["api"]
    assert services["director"]["image"] == services["api"]["image"]
    assert services["director"]["healthcheck"]["test"] == "baton probe director"
    assert services["api"]["healthcheck"]["test"] == "baton probe api"


def test_local_override_only_swaps_the_backing_images() -> None:
    override = yaml.safe_load((DEPLOY / "docker-compose.local.yml").read_text())
    assert {name: set(service) for name, service in override["services"].items()} == {
        "postgres": {"image"},
        "rabbitmq": {"image"},
    }


def test_compose_workers_override_replaces_directors_with_workers() -> None:
    base = yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())["services"]
    override = yaml.safe_load((DEPLOY / "docker-compose.workers.yml").read_text())["services"]
    assert override["director"]["deploy"]["replicas"] == 0
    worker = override["worker"]
    assert worker["command"] == ["worker"] and worker["deploy"]["replicas"] == 3
    assert worker["image"] == base["api"]["image"]
    assert worker["environment"]["BATON_DATABASE_URL"] == base["api"]["environment"]["BATON_DATABASE_URL"]
    assert worker["environment"]["BATON_AMQP_URL"] == base["api"]["environment"]["BATON_AMQP_URL"]
    assert worker["healthcheck"]["test"] == "baton probe worker"
