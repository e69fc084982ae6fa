"""An engine lane as Kubernetes manifests, for operators who outgrow one rack.

`export_lws` (lws.py) turns what `invoke plan` would start, refused as `invoke check`
refuses, into a LeaderWorkerSet (kubernetes-sigs/lws) and a Service for its leader's API.
Pure: inventory and engine profile in, plain dicts out; nothing is contacted.

- command.py: a rank's argv with the rank-dependent words as LWS `$(VAR)` references;
- env.py: `export_env`, the container env and the one place that knows its source;
- secrets.py: the Secret's keys as read-only files (HF_TOKEN_PATH), required or optional;
- pods.py: the leader and worker pod templates, Guaranteed, scheduling on cap-verified
  GB10 nodes; probes.py: their probes; gate.py: the init container that lets an engine
  start only on a node verified in this boot, recently;
- agent.py: the node agent (a DaemonSet) that keeps each node's clock-cap record: the
  label, a NoExecute taint, the verdict of which boot;
- access.py: the namespace (privileged pod security) and the accounts' RBAC;
  admission.py: the policy that lets the agent change only its own Node, only its keys;
- cluster.py: the cluster's side (namespace, tolerations, priority class, resources);
- files.py: the objects as YAML, on stdout or one file per object with a kustomization.
"""

from sparkrack.export.cluster import DEFAULT_RDMA_RESOURCE, ClusterOptions, cluster_options
from sparkrack.export.files import manifest_yaml, write_manifests
from sparkrack.export.lws import LwsExport, ProfileRefused, export_lws
from sparkrack.export.pods import CAP_VERIFIED_LABEL, GB10_PRODUCT, GPU_PRODUCT_LABEL

__all__ = ["CAP_VERIFIED_LABEL", "DEFAULT_RDMA_RESOURCE", "GB10_PRODUCT", "GPU_PRODUCT_LABEL",
           "ClusterOptions", "LwsExport", "ProfileRefused", "cluster_options", "export_lws",
           "manifest_yaml", "write_manifests"]
