"""An engine lane as Kubernetes manifests, for operators who outgrow one rack: `export_lws`
(lws.py). Pure: inventory and engine profile in, plain dicts out; nothing is contacted
(docs/kubernetes.md; each module: docs/kubernetes.md#the-code).
"""

from sparkrack.export.cluster import (
           DEFAULT_RDMA_RESOURCE,
           ClusterOptions,
           cluster_options,
)
from sparkrack.export.files import manifest_yaml, write_manifests
from sparkrack.export.lws import LwsExport, ProfileRefused, export_lws
from sparkrack.export.pods import CAP_VERIFIED_LABEL, GB10_PRODUCT, GPU_PRODUCT_LABEL

__all__ = ["CAP_VERIFIED_LABEL", "DEFAULT_RDMA_RESOURCE", "GB10_PRODUCT", "GPU_PRODUCT_LABEL",
           "ClusterOptions", "LwsExport", "ProfileRefused", "cluster_options", "export_lws",
           "manifest_yaml", "write_manifests"]
