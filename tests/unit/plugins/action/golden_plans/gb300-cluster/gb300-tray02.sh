#!/bin/sh
# gb300-tray02 (worker, node rank 1): equivalent of the planned container.
# Secrets are not written here: export VLLM_API_KEY before running.
docker run --detach \
  --name vllm-kimi-k3 \
  --network host \
  --ipc host \
  --ulimit memlock=-1:-1 \
  --ulimit stack=67108864:67108864 \
  --gpus all \
  --device /dev/nvidia-caps-imex-channels/channel0:/dev/nvidia-caps-imex-channels/channel0:rwm \
  --cap-add IPC_LOCK \
  --volume /data/hf-cache:/root/.cache/huggingface \
  --label io.gpufleet.kimi_k3.node_rank=1 \
  --label io.gpufleet.kimi_k3.plan_hash=1a4b002eeb321464 \
  --label io.gpufleet.kimi_k3.role=worker \
  --label io.gpufleet.kimi_k3.strategy=multi_node_tp \
  --restart no \
  --env GLOO_SOCKET_IFNAME=bond0 \
  --env NCCL_CUMEM_ENABLE=1 \
  --env NCCL_MNNVL_ENABLE=1 \
  --env NCCL_NVLS_ENABLE=1 \
  --env NCCL_SOCKET_IFNAME=bond0 \
  --env VLLM_ALLREDUCE_USE_FLASHINFER=1 \
  --env VLLM_ENGINE_READY_TIMEOUT_S=3600 \
  --env VLLM_HOST_IP=10.20.0.12 \
  --env VLLM_USE_RUST_FRONTEND=1 \
  --env VLLM_USE_V2_MODEL_RUNNER=1 \
  --env VLLM_API_KEY \
  vllm/vllm-openai@sha256:7d2f6c3a1b9e4f5d8c0a2e6b4d1f3a5c7e9b0d2f4a6c8e1b3d5f7a9c0e2b4d6f \
  moonshotai/Kimi-K3 \
  --trust-remote-code \
  --gpu-memory-utilization 0.95 \
  --tensor-parallel-size 8 \
  --nnodes 2 \
  --node-rank 1 \
  --master-addr 10.20.0.11 \
  --headless \
  --load-format fastsafetensors \
  --no-enable-flashinfer-autotune \
  --max-model-len 1048576 \
  --kv-cache-dtype fp8 \
  --attention-config '{"use_prefill_query_quantization":true,"mla_prefill_backend":"flashinfer"}' \
  --enable-prefix-caching \
  --enable-auto-tool-choice \
  --tool-call-parser kimi_k3 \
  --reasoning-parser kimi_k3 \
  --revision 4c1d7e2a9b3f5d6e8a0c2b4d6f8e1a3c5b7d9f0e \
  --code-revision 4c1d7e2a9b3f5d6e8a0c2b4d6f8e1a3c5b7d9f0e
