#!/usr/bin/env sh
# A local cluster with kind (needs Docker, kind and kubectl): build the image, load it, apply
# the CRDs and wait for them, then the engine and the operator, then the ORDERS example, and
# show the result.
#   operator/deploy/kind.sh            # cluster "headwater"
#   KIND_CLUSTER=dev operator/deploy/kind.sh
set -eu
cluster="${KIND_CLUSTER:-headwater}"
root="$(cd "$(dirname "$0")/../.." && pwd)"

if ! kind get clusters | grep -qx "$cluster"; then
  kind create cluster --name "$cluster"
fi
docker build -f "$root/operator/Dockerfile" -t headwater:latest "$root"
kind load docker-image headwater:latest --name "$cluster"

# The CRDs first, in a step of their own: a custom object (the ClusterKopfPeering) sent in the
# same apply as its CRD fails on a fresh cluster, before the API server serves the new kind.
kubectl apply -k "$root/operator/deploy/crds"
kubectl wait --for=condition=established --timeout=60s \
  crd/streams.headwater.io crd/consumers.headwater.io crd/keyvalues.headwater.io \
  crd/objectstores.headwater.io crd/streamtemplates.headwater.io \
  crd/kopfpeerings.kopf.dev crd/clusterkopfpeerings.kopf.dev
kubectl apply -k "$root/operator/deploy"
kubectl -n headwater rollout status statefulset/headwater --timeout=300s
# Every engine pod ready: each has joined the cluster's metadata (its etcd member has a quorum).
kubectl -n headwater wait --for=condition=Ready --timeout=120s \
  pod/headwater-0 pod/headwater-1 pod/headwater-2
kubectl -n headwater rollout status deployment/headwater-operator --timeout=180s

kubectl -n default apply -f "$root/examples/orders/"
kubectl -n default wait --for=condition=Ready stream/orders --timeout=60s
kubectl -n default get headwater
