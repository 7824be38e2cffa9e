"""The Kubernetes runner and Lease elector, with the official client against a REST test server."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client, watch

from baton.control.director import Director
from baton.control.kubernetes import DNS_LABEL, SELECTOR, KubernetesRunner, LeaseElector, pod_name
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType
from baton.core.settings import Settings
from baton.storage.control.organisations import create_organisation, delete_organisation
from baton.storage.engine import Store
from tests.fake_kube import FakeKubernetes

NAMESPACE = "baton"


@pytest.fixture
def kube() -> Iterator[FakeKubernetes]:
    fake = FakeKubernetes().start()
    yield fake
    fake.stop()


def k8s_settings(store: Store) -> Settings:
    return Settings(
        database_url=store.url,
        k8s_namespace=NAMESPACE,
        k8s_image="registry.example/baton:1",
        k8s_owner_deployment="baton-director",
    )


def make_director(store: Store, kube: FakeKubernetes) -> Director:
    settings = k8s_settings(store)
    return Director(store, settings, KubernetesRunner(kube.api_client(), settings, NAMESPACE))


def add_org(store: Store, org: str) -> None:
    with store.session() as session:
        create_organisation(session, org, org, maxsize=10)


@pytest.mark.parametrize(
    "organisation",
    ["acme", "ACME_corp.nl", "a" * 64, "x.y_z-", "9", "org." + "long" * 14, "Über".encode().decode()[:1] + "ber"],
)
def test_pod_names_are_valid_dns_labels(organisation: str) -> None:
    for kind in SchedulerType:
        name = pod_name(SchedulerSpec(organisation, kind))
        assert len(name) <= 63 and DNS_LABEL.match(name), name
    assert pod_name(SchedulerSpec("acme", SchedulerType.BOEFJE)) == "baton-boefje-acme"


def test_pod_names_stay_distinct_when_hashed() -> None:
    names = {pod_name(SchedulerSpec(org, SchedulerType.BOEFJE)) for org in ("Acme", "acme_", "acme.", "ACME", "a" * 64)}
    assert len(names) == 5


def test_organisation_lifecycle_creates_and_deletes_pods(store: Store, kube: FakeKubernetes) -> None:
    deployment = kube.add_deployment("baton-director", NAMESPACE)
    director = make_director(store, kube)
    add_org(store, "acme")
    add_org(store, "Big_Org.example")
    director.reconcile()
    pods = kube.pods(NAMESPACE)
    assert len(pods) == 6
    boefje = next(p for p in pods if p["metadata"]["name"] == "baton-boefje-acme")
    labels = boefje["metadata"]["labels"]
    assert labels["baton/organisation"] == "acme" and labels["baton/scheduler"] == "boefje"
    assert labels["app.kubernetes.io/managed-by"] == "baton-director"
    assert boefje["metadata"]["ownerReferences"][0]["uid"] == deployment["metadata"]["uid"]
    container = boefje["spec"]["containers"][0]
    assert container["args"][:5] == ["standalone", "--organisation", "acme", "--scheduler", "boefje"]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert boefje["spec"]["securityContext"]["runAsNonRoot"] is True
    assert {"configMapRef": {"name": "baton-config"}} in container["envFrom"]
    big = [p for p in pods if p["metadata"]["annotations"]["baton/organisation-id"] == "Big_Org.example"]
    assert len(big) == 3 and all(DNS_LABEL.match(p["metadata"]["name"]) for p in big)

    with store.session() as session:
        delete_organisation(session, "acme")
    report = director.reconcile()
    assert sorted(report.stopped) == ["boefje-acme", "normalizer-acme", "report-acme"]
    assert {p["metadata"]["annotations"]["baton/organisation-id"] for p in kube.pods(NAMESPACE)} == {"Big_Org.example"}


def test_failed_pod_is_replaced_and_status_follows_the_phase(store: Store, kube: FakeKubernetes) -> None:
    director = make_director(store, kube)
    add_org(store, "acme")
    director.reconcile()
    runner = director.runner
    assert runner.status("boefje-acme") == SchedulerState.STARTING
    kube.set_phase("baton-boefje-acme", "Running", NAMESPACE)
    assert runner.status("boefje-acme") == SchedulerState.RUNNING
    old_uid = next(p for p in kube.pods(NAMESPACE) if p["metadata"]["name"] == "baton-boefje-acme")["metadata"]["uid"]
    kube.set_phase("baton-boefje-acme", "Failed", NAMESPACE)
    assert runner.status("boefje-acme") == SchedulerState.FAILED
    report = director.reconcile()
    assert report.restarted == ["boefje-acme"]
    replacement = next(p for p in kube.pods(NAMESPACE) if p["metadata"]["name"] == "baton-boefje-acme")
    assert replacement["metadata"]["uid"] != old_uid and replacement["status"]["phase"] == "Pending"
    assert len(kube.pods(NAMESPACE)) == 3


def test_restarted_director_adopts_existing_pods(store: Store, kube: FakeKubernetes) -> None:
    add_org(store, "acme")
    make_director(store, kube).reconcile()
    uids = {p["metadata"]["uid"] for p in kube.pods(NAMESPACE)}
    successor = make_director(store, kube)  # a new process: knows nothing but what it lists
    before = len(kube.requests)
    report = successor.reconcile()
    assert report.started == [] and report.stopped == []
    assert {p["metadata"]["uid"] for p in kube.pods(NAMESPACE)} == uids
    assert not [request for request in kube.requests[before:] if request[0] == "POST"]
    successor.stop()  # stepping down leaves the pods to the next leader
    assert len(kube.pods(NAMESPACE)) == 3


def elector(kube: FakeKubernetes, identity: str, seconds: int = 2) -> LeaseElector:
    return LeaseElector(kube.api_client(), NAMESPACE, "baton-director", identity, lease_seconds=seconds)


def test_two_directors_one_leads_and_the_other_takes_over_when_renewal_stops(
    store: Store, kube: FakeKubernetes
) -> None:
    add_org(store, "acme")
    settings = k8s_settings(store)
    first = Director(store, settings, KubernetesRunner(kube.api_client(), settings, NAMESPACE), elector(kube, "a"))
    second = Director(store, settings, KubernetesRunner(kube.api_client(), settings, NAMESPACE), elector(kube, "b"))
    assert first.step() is not None
    assert second.step() is None  # the lease is held and fresh
    assert first.step() is not None  # renewing keeps it
    assert len(kube.pods(NAMESPACE)) == 3
    time.sleep(2.3)  # `first` stops renewing; its lease expires
    takeover = second.step()
    assert takeover is not None and takeover.started == []  # adopted, nothing duplicated
    assert first.step() is None and not first.is_leader  # lost the lease: stops at once
    lease = client.CoordinationV1Api(kube.api_client()).read_namespaced_lease("baton-director", NAMESPACE)
    assert lease.spec.holder_identity == "b" and lease.spec.lease_transitions == 1
    assert len(kube.pods(NAMESPACE)) == 3


def test_lease_write_race_is_decided_by_resource_version(kube: FakeKubernetes) -> None:
    a, b = elector(kube, "a", 1), elector(kube, "b", 1)
    assert a.acquire_or_renew()
    time.sleep(1.2)
    api = client.CoordinationV1Api(kube.api_client())
    stale = api.read_namespaced_lease("baton-director", NAMESPACE)
    assert b.acquire_or_renew()  # b takes the expired lease first
    stale.spec.holder_identity = "a"
    with pytest.raises(client.ApiException) as conflict:
        api.replace_namespaced_lease("baton-director", NAMESPACE, stale)
    assert conflict.value.status == 409
    assert not a.acquire_or_renew()
    b.release()
    assert a.acquire_or_renew()


def test_pods_can_be_watched_by_label(store: Store, kube: FakeKubernetes) -> None:
    add_org(store, "acme")
    core = client.CoreV1Api(kube.api_client())
    version = core.list_namespaced_pod(NAMESPACE, label_selector=SELECTOR).metadata.resource_version
    make_director(store, kube).reconcile()
    seen = [
        (event["type"], event["object"].metadata.name)
        for event in watch.Watch().stream(
            core.list_namespaced_pod, NAMESPACE, label_selector=SELECTOR, resource_version=version, timeout_seconds=1
        )
    ]
    assert sorted(seen) == [
        ("ADDED", "baton-boefje-acme"),
        ("ADDED", "baton-normalizer-acme"),
        ("ADDED", "baton-report-acme"),
    ]
