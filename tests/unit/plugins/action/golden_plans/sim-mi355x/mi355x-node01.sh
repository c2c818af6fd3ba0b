#!/bin/sh
# mi355x-node01 (head, node rank 0): equivalent of the planned container.
docker run --detach \
  --name vllm-kimi-k3 \
  --network host \
  --ipc host \
  --ulimit memlock=8388608:8388608 \
  --ulimit stack=67108864:67108864 \
  --device /dev/kfd:/dev/kfd:rwm \
  --device /dev/dri:/dev/dri:rwm \
  --device /dev/infiniband:/dev/infiniband:rwm \
  --group-add video \
  --security-opt seccomp=unconfined \
  --cap-add IPC_LOCK \
  --volume /var/lib/kimi-sim/models:/root/.cache/huggingface \
  --label io.gpufleet.kimi_k3.node_rank=0 \
  --label io.gpufleet.kimi_k3.plan_hash=fe4aa5e9f2cb3813 \
  --label io.gpufleet.kimi_k3.role=head \
  --label io.gpufleet.kimi_k3.strategy=multi_node_dep \
  --restart no \
  --env AITER_BF16_FP8_MOE_BOUND=0 \
  --env GLOO_SOCKET_IFNAME=lo \
  --env NCCL_SOCKET_IFNAME=lo \
  --env SAFETENSORS_FAST_GPU=1 \
  --env VLLM_ENGINE_READY_TIMEOUT_S=3600 \
  --env VLLM_ROCM_USE_AITER=1 \
  --env VLLM_ROCM_USE_AITER_MOE_SITUV2_A8W4=1 \
  --env VLLM_STANDIN_LOAD_S=3 \
  --env VLLM_USE_BREAKABLE_CUDAGRAPH=0 \
  127.0.0.1:5000/vllm/vllm-openai-rocm@sha256:eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee \
  moonshotai/Kimi-K3 \
  --trust-remote-code \
  --enable-expert-parallel \
  --data-parallel-hybrid-lb \
  --data-parallel-size 16 \
  --data-parallel-size-local 8 \
  --data-parallel-address 127.0.0.21 \
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
  --revision cb244096ec4ee7dbcdec1d8e6595c38c2f69820d \
  --code-revision cb244096ec4ee7dbcdec1d8e6595c38c2f69820d \
  --host 127.0.0.21
