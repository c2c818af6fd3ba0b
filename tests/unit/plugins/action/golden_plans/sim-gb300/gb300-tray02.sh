#!/bin/sh
# gb300-tray02 (worker, node rank 1): equivalent of the planned container.
docker run --detach \
  --name vllm-kimi-k3 \
  --network host \
  --ipc host \
  --ulimit memlock=8388608:8388608 \
  --ulimit stack=67108864:67108864 \
  --gpus all \
  --device /dev/nvidia-caps-imex-channels/channel0:/dev/nvidia-caps-imex-channels/channel0:rwm \
  --cap-add IPC_LOCK \
  --volume /var/lib/kimi-sim/models:/root/.cache/huggingface \
  --label io.gpufleet.kimi_k3.node_rank=1 \
  --label io.gpufleet.kimi_k3.plan_hash=6add66694444b176 \
  --label io.gpufleet.kimi_k3.role=worker \
  --label io.gpufleet.kimi_k3.strategy=multi_node_tp \
  --restart no \
  --env GLOO_SOCKET_IFNAME=lo \
  --env NCCL_CUMEM_ENABLE=1 \
  --env NCCL_MNNVL_ENABLE=1 \
  --env NCCL_NVLS_ENABLE=1 \
  --env NCCL_SOCKET_IFNAME=lo \
  --env VLLM_ALLREDUCE_USE_FLASHINFER=1 \
  --env VLLM_ENGINE_READY_TIMEOUT_S=3600 \
  --env VLLM_HOST_IP=127.0.0.12 \
  --env VLLM_STANDIN_LOAD_S=3 \
  --env VLLM_USE_RUST_FRONTEND=1 \
  --env VLLM_USE_V2_MODEL_RUNNER=1 \
  127.0.0.1:5000/vllm/vllm-openai@sha256:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee \
  moonshotai/Kimi-K3 \
  --trust-remote-code \
  --gpu-memory-utilization 0.95 \
  --tensor-parallel-size 8 \
  --nnodes 2 \
  --node-rank 1 \
  --master-addr 127.0.0.11 \
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
  --revision cb244096ec4ee7dbcdec1d8e6595c38c2f69820d \
  --code-revision cb244096ec4ee7dbcdec1d8e6595c38c2f69820d
