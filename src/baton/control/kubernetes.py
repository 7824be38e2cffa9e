"""Kubernetes: a runner that keeps one Pod per (organisation, scheduler type), and a Lease elector.

Both use the official `kubernetes` client. Configuration is found automatically: the in-cluster
service account when running in a pod, else the user's kubeconfig.

The runner's state lives in the cluster, not in the director: every round it lists the pods that
carry its labels, so a restarted or newly elected director adopts the pods already there and never
creates a twin. Pods outlive a director that steps down or dies; the ownerReference (to the
director's Deployment, else its pod) lets Kubernetes delete them when Baton is uninstalled.
"""

from __future__ import annotations

import builtins
import hashlib
import os
import re
from datetime import UTC, datetime, timedelta
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from baton.control.runners import standalone_args
from baton.core.errors import ConfigurationError
from baton.core.leases import lease_expired
from baton.core.logging import get_logger
from baton.core.model import SchedulerSpec, SchedulerState, SchedulerType
from baton.core.settings import Settings

log = get_logger("baton.k8s")

APP_LABELS = {
    "app.kubernetes.io/name": "baton",
    "app.kubernetes.io/component": "scheduler",
    "app.kubernetes.io/managed-by": "baton-director",
}
ORGANISATION_LABEL = "baton/organisation"
SCHEDULER_LABEL = "baton/scheduler"
ORGANISATION_ANNOTATION = "baton/organisation-id"
SELECTOR = ",".join(f"{key}={value}" for key, value in APP_LABELS.items())
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def _digest(text: str, length: int = 10) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:length]


def pod_name(spec: SchedulerSpec) -> str:
    """A valid DNS-1123 label for any organisation id: readable when possible, hashed when not."""
    readable = f"baton-{spec.type.value}-{spec.organisation}"
    if len(readable) <= 63 and DNS_LABEL.match(readable):
        return readable
    cleaned = re.sub(r"[^a-z0-9-]+", "-", spec.organisation.lower()).strip("-")
    prefix = f"baton-{spec.type.value}-"
    room = 63 - len(prefix) - 11  # "-" + 10 hex digits of the digest
    stem = cleaned[:room].strip("-")
    return f"{prefix}{stem + '-' if stem else ''}{_digest(spec.organisation)}"


def organisation_label(organisation: str) -> str:
    if len(organisation) <= 63 and LABEL_VALUE.match(organisation):
        return organisation
    return f"h-{_digest(organisation, 20)}"


def load_api_client(settings: Settings) -> tuple[client.ApiClient, str]:
    """The API client and the namespace to work in: in-cluster service account when available,
    else the kubeconfig (KUBECONFIG or ~/.kube/config) and its current context's namespace."""
    try:
        config.load_incluster_config()  # type: ignore[no-untyped-call]
        log.info("kubernetes: in-cluster configuration")
        return client.ApiClient(), settings.k8s.namespace or _service_account_namespace()
    except config.ConfigException:
        pass
    # Read KUBECONFIG now: the client reads it once, at import.
    kubeconfig = os.path.expanduser(os.environ.get("KUBECONFIG") or "~/.kube/config")
    try:
        config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
        _contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    except (config.ConfigException, OSError) as exc:
        raise ConfigurationError(
            f"not in a pod and no usable kubeconfig ({str(exc).strip() or type(exc).__name__}); "
            "set KUBECONFIG, or run the director inside the cluster"
        ) from exc
    context_namespace = (active or {}).get("context", {}).get("namespace")
    namespace = settings.k8s.namespace or context_namespace or "default"
    log.info("kubernetes: kubeconfig", context=(active or {}).get("name"), namespace=namespace)
    return client.ApiClient(), namespace


def _service_account_namespace() -> str:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as handle:
            return handle.read().strip() or "default"
    except OSError:
        return "default"


PHASE_STATE = {
    "Pending": SchedulerState.STARTING,
    "Running": SchedulerState.RUNNING,
    "Succeeded": SchedulerState.FAILED,  # a scheduler never finishes on purpose
    "Failed": SchedulerState.FAILED,
}


class KubernetesRunner:
    """Runner interface (see runners.py) with pods; the cluster is the source of truth."""

    name = "kubernetes"
    revokes_on_takeover = False

    def __init__(self, api: client.ApiClient, settings: Settings, namespace: str) -> None:
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.settings = settings
        self.namespace = namespace
        self._owner: dict[str, Any] | None = None
        self._owner_known = False

    # -- the pod -----------------------------------------------------------------------------------
    def owner_reference(self) -> dict[str, Any] | None:
        if self._owner_known:
            return self._owner
        owner: dict[str, Any] | None = None
        if self.settings.k8s.owner_deployment:
            try:
                deployment = self.apps.read_namespaced_deployment(self.settings.k8s.owner_deployment, self.namespace)
            except ApiException as exc:
                # Pods without an owner still work; only uninstall cleanup is lost. Try again next time.
                log.warning(
                    "owner deployment unreadable; pods get no ownerReference",
                    status=exc.status,
                    deployment=self.settings.k8s.owner_deployment,
                )
                return None
            meta = deployment.metadata or client.V1ObjectMeta()
            owner = {"apiVersion": "apps/v1", "kind": "Deployment", "name": meta.name, "uid": meta.uid}
        elif os.environ.get("POD_NAME") and os.environ.get("POD_UID"):
            owner = {"apiVersion": "v1", "kind": "Pod", "name": os.environ["POD_NAME"], "uid": os.environ["POD_UID"]}
        if owner is not None:
            owner.update({"controller": False, "blockOwnerDeletion": False})
        self._owner, self._owner_known = owner, True
        return owner

    def pod_manifest(self, spec: SchedulerSpec) -> dict[str, Any]:
        settings = self.settings
        env_from: list[dict[str, Any]] = []
        if settings.k8s.config_map:
            env_from.append({"configMapRef": {"name": settings.k8s.config_map}})
        if settings.k8s.secret:
            env_from.append({"secretRef": {"name": settings.k8s.secret}})
        metadata: dict[str, Any] = {
            "name": pod_name(spec),
            "namespace": self.namespace,
            "labels": {
                **APP_LABELS,
                ORGANISATION_LABEL: organisation_label(spec.organisation),
                SCHEDULER_LABEL: spec.type.value,
            },
            "annotations": {ORGANISATION_ANNOTATION: spec.organisation},
        }
        owner = self.owner_reference()
        if owner is not None:
            metadata["ownerReferences"] = [owner]
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": metadata,
            "spec": {
                "restartPolicy": "Always",
                "serviceAccountName": settings.k8s.scheduler_service_account,
                "automountServiceAccountToken": False,
                "securityContext": {
                    "runAsNonRoot": True,
                    "runAsUser": 10001,
                    "seccompProfile": {"type": "RuntimeDefault"},
                },
                "containers": [
                    {
                        "name": "scheduler",
                        "image": settings.k8s.image,
                        "args": standalone_args(spec, self.name),
                        "envFrom": env_from,
                        "resources": {
                            "requests": {"cpu": "50m", "memory": "80Mi"},
                            "limits": {"cpu": "500m", "memory": "256Mi"},
                        },
                        "securityContext": {
                            "allowPrivilegeEscalation": False,
                            "readOnlyRootFilesystem": True,
                            "runAsNonRoot": True,
                            "capabilities": {"drop": ["ALL"]},
                        },
                    }
                ],
            },
        }

    # -- Runner interface --------------------------------------------------------------------------
    def _pods(self) -> dict[str, Any]:
        pods = self.core.list_namespaced_pod(self.namespace, label_selector=SELECTOR).items
        found = {}
        for pod in pods:
            meta = pod.metadata or client.V1ObjectMeta()
            annotations = meta.annotations or {}
            labels = meta.labels or {}
            organisation = annotations.get(ORGANISATION_ANNOTATION)
            kind = labels.get(SCHEDULER_LABEL)
            if organisation is None or kind not in {t.value for t in SchedulerType}:
                continue
            found[SchedulerSpec(organisation, SchedulerType(kind)).id] = pod
        return found

    def follow_leader(self, term: int | None) -> None:
        """Pods claim their rows on their own (they outlive directors); no term to pass on."""
        return None

    def start_many(self, specs: builtins.list[SchedulerSpec]) -> builtins.list[str]:
        for spec in specs:
            self.start(spec)
        return [spec.id for spec in specs]

    def start(self, spec: SchedulerSpec) -> None:
        try:
            # The client serialises plain dicts as they are; the manifest reads like the YAML it is.
            self.core.create_namespaced_pod(self.namespace, cast(client.V1Pod, self.pod_manifest(spec)))
            log.info("pod created", scheduler=spec.id, pod=pod_name(spec))
        except ApiException as exc:
            if exc.status != 409:  # 409: the pod exists already, which is what we want
                raise

    def stop(self, scheduler_id: str, timeout: float = 10.0) -> None:
        spec = SchedulerSpec.parse(scheduler_id)
        pod = self._pods().get(scheduler_id)
        name = pod.metadata.name if pod is not None else pod_name(spec)
        try:
            self.core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=int(timeout))
            log.info("pod deleted", scheduler=scheduler_id, pod=name)
        except ApiException as exc:
            if exc.status != 404:
                raise

    def restart(self, scheduler_id: str) -> None:
        self.stop(scheduler_id, timeout=0)
        self.start(SchedulerSpec.parse(scheduler_id))

    def list(self) -> list[SchedulerSpec]:
        return sorted(SchedulerSpec.parse(scheduler_id) for scheduler_id in self._pods())

    def status(self, scheduler_id: str) -> SchedulerState | None:
        pod = self._pods().get(scheduler_id)
        if pod is None:
            return None
        if pod.metadata.deletion_timestamp is not None:
            return SchedulerState.STOPPING
        return PHASE_STATE.get(pod.status.phase if pod.status else "Pending", SchedulerState.STARTING)

    def supervise(self) -> builtins.list[str]:
        """Replace pods that ended (evicted, node lost, exited): the kubelet restarts crashed
        containers in place, but a pod in phase Failed or Succeeded never runs again."""
        replaced = []
        for scheduler_id, pod in self._pods().items():
            phase = pod.status.phase if pod.status else None
            if phase in ("Failed", "Succeeded") and pod.metadata.deletion_timestamp is None:
                log.warning("pod ended; replacing it", scheduler=scheduler_id, phase=phase)
                self.restart(scheduler_id)
                replaced.append(scheduler_id)
        return replaced

    def shutdown(self, timeout: float = 10.0) -> None:
        """Pods outlive a director that stops or steps down: the next leader adopts them."""
        return None


def _now() -> datetime:
    return datetime.now(UTC)


class LeaseElector:
    """Leader election on a `coordination.k8s.io/v1` Lease: acquire when free or expired, renew
    while leading, and stop leading the moment a renewal fails or would come too late."""

    recorded_in_database = False

    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        name: str,
        identity: str,
        lease_seconds: int = 15,
        renew_deadline_seconds: float | None = None,
    ) -> None:
        self.coordination = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_seconds = lease_seconds
        self.renew_deadline_seconds = renew_deadline_seconds or lease_seconds * 2 / 3
        self._renewed_at: datetime | None = None
        self._term: int | None = None

    @property
    def term(self) -> int | None:
        """The Lease's `leaseTransitions` when we took it: grows with every change of holder."""
        return self._term

    def _spec(self, transitions: int, acquired: datetime | None) -> client.V1LeaseSpec:
        now = _now()
        return client.V1LeaseSpec(
            holder_identity=self.identity,
            lease_duration_seconds=self.lease_seconds,
            acquire_time=acquired or now,
            renew_time=now,
            lease_transitions=transitions,
        )

    def acquire_or_renew(self) -> bool:
        try:
            leading = self._try()
        except ApiException as exc:
            if exc.status != 409:  # 409: someone else wrote the lease first
                log.warning("lease request failed", status=exc.status)
            leading = False
        except Exception as exc:  # API server unreachable
            log.warning("lease request failed", error=repr(exc))
            leading = False
        if not leading:
            self._renewed_at = None
            self._term = None
        return leading

    def _try(self) -> bool:
        now = _now()
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=self.name, namespace=self.namespace), spec=self._spec(0, None)
            )
            self.coordination.create_namespaced_lease(self.namespace, body)
            self._renewed_at, self._term = now, 0
            log.info("lease created; leading", lease=self.name)
            return True
        spec = lease.spec or client.V1LeaseSpec()
        holder = spec.holder_identity
        duration = timedelta(seconds=spec.lease_duration_seconds or self.lease_seconds)
        renewed = spec.renew_time
        expired = lease_expired(renewed, duration, now)
        if holder == self.identity:
            if self._renewed_at is None or now - self._renewed_at > timedelta(seconds=self.renew_deadline_seconds):
                # Too slow (frozen?) or a previous life of ours: our schedulers may have been
                # handed on meanwhile, so take the lease as a new term rather than carry on.
                lease.spec = self._spec((spec.lease_transitions or 0) + 1, None)
            else:
                lease.spec = self._spec(spec.lease_transitions or 0, spec.acquire_time)
        elif holder and not expired:
            return False
        else:
            lease.spec = self._spec((spec.lease_transitions or 0) + 1, None)
            log.info("taking over the lease", lease=self.name, previous=holder)
        # resourceVersion travels with `lease`: a concurrent writer makes this a 409.
        self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        self._renewed_at, self._term = now, lease.spec.lease_transitions
        return True

    def release(self) -> None:
        try:
            lease = self.coordination.read_namespaced_lease(self.name, self.namespace)
            if lease.spec is not None and lease.spec.holder_identity == self.identity:
                lease.spec.holder_identity = None
                lease.spec.renew_time = None
                self.coordination.replace_namespaced_lease(self.name, self.namespace, lease)
        except Exception as exc:
            log.warning("could not release the lease", error=repr(exc))
        self._renewed_at = None
        self._term = None
