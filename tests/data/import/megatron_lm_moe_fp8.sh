#!/bin/bash
# A Megatron-LM mixture-of-experts run on Hopper with FP8 and expert parallelism.
export CUDA_DEVICE_MAX_CONNECTIONS=1

MODEL_ARGS=(
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32
    --group-query-attention --num-query-groups 8 --seq-length 4096 --max-position-embeddings 32768
    --position-embedding-type rope --swiglu --normalization RMSNorm --disable-bias-linear
    --untie-embeddings-and-output-weights
)
torchrun --nproc_per_node 8 --nnodes 8 pretrain_gpt.py \
    --num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 \
    --group-query-attention --num-query-groups 8 --seq-length 4096 --max-position-embeddings 32768 \
    --position-embedding-type rope --swiglu --normalization RMSNorm --disable-bias-linear \
    --untie-embeddings-and-output-weights \
    --num-experts 8 --moe-router-topk 2 --moe-grouped-gemm --expert-model-parallel-size 8 \
    --tensor-model-parallel-size 1 --pipeline-model-parallel-size 4 --sequence-parallel \
    --use-distributed-optimizer \
    --recompute-granularity full --recompute-method uniform --recompute-num-layers 1 \
    --micro-batch-size 1 --global-batch-size 256 \
    --bf16 --fp8-format hybrid --fp8-amax-history-len 1024 --fp8-amax-compute-algo max \
    --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --train-iters 500000
