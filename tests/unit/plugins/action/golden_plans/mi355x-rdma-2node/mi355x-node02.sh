#!/bin/sh
# mi355x-node02 (worker, node rank 1): equivalent of the planned container.
# Secrets are not written here: export VLLM_API_KEY before running.
docker run --detach \
  --name vllm-kimi-k3 \
  --network host \
  --ipc host \
  --ulimit memlock=-1:-1 \
  --ulimit stack=67108864:67108864 \
  --device /dev/kfd:/dev/kfd:rwm \
  --device /dev/dri:/dev/dri:rwm \
  --device /dev/infiniband:/dev/infiniband:rwm \
  --group-add video \
  --security-opt seccomp=unconfined \
  --cap-add IPC_LOCK \
  --volume /data/hf-cache:/root/.cache/huggingface \
  --label io.gpufleet.kimi_k3.node_rank=1 \
  --label io.gpufleet.kimi_k3.plan_hash=49cd7d4836ba82bb \
  --label io.gpufleet.kimi_k3.role=worker \
  --label io.gpufleet.kimi_k3.strategy=multi_node_dep \
  --restart no \
  --env AITER_BF16_FP8_MOE_BOUND=0 \
  --env AITER_SITUV2_A8W4=1 \
  --env GLOO_SOCKET_IFNAME=ens50f0 \
  --env NCCL_SOCKET_IFNAME=ens50f0 \
  --env SAFETENSORS_FAST_GPU=1 \
  --env VLLM_ENGINE_READY_TIMEOUT_S=3600 \
  --env VLLM_HOST_IP=10.30.0.22 \
  --env VLLM_ROCM_USE_AITER=1 \
  --env VLLM_USE_BREAKABLE_CUDAGRAPH=0 \
  --env VLLM_API_KEY \
  vllm/vllm-openai-rocm@sha256:5aa7e626ff73672f5ca7aae46754570488c23d33ca1ac90756a1d2d1a3fe099b \
  moonshotai/Kimi-K3 \
  --trust-remote-code \
  --enable-expert-parallel \
  --data-parallel-hybrid-lb \
  --data-parallel-size 16 \
  --data-parallel-size-local 8 \
  --data-parallel-address 10.30.0.21 \
  --data-parallel-start-rank 8 \
  --load-format auto \
  --gpu-memory-utilization 0.95 \
  --mm-encoder-tp-mode data \
  --max-num-seqs 128 \
  --max-num-batched-tokens 4096 \
  --compilation-config '{"cudagraph_mode":"FULL_DECODE_ONLY","custom_ops":["+fused_rms_norm_gated"]}' \
  --enable-auto-tool-choice \
  --tool-call-parser kimi_k3 \
  --reasoning-parser kimi_k3 \
  --all2all-backend mori_high_throughput \
  --revision 4c1d7e2a9b3f5d6e8a0c2b4d6f8e1a3c5b7d9f0e \
  --code-revision 4c1d7e2a9b3f5d6e8a0c2b4d6f8e1a3c5b7d9f0e
