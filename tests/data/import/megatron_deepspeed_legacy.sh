#!/bin/bash
# A Megatron-DeepSpeed pretraining script of the 2021 kind: old batch flag, uniform activation checkpointing.
GPUS_PER_NODE=8
NNODES=4
TP=2
PP=4
MICRO=4
DS_CONFIG=ds_config_legacy.json

DATA_ARGS="--data-path /data/pile_text_document --vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt"

deepspeed --num_gpus $GPUS_PER_NODE --num_nodes $NNODES pretrain_gpt.py \
    --tensor-model-parallel-size $TP \
    --pipeline-model-parallel-size $PP \
    --num-layers 32 \
    --hidden-size 4096 \
    --num-attention-heads 32 \
    --seq-length 2048 \
    --max-position-embeddings 2048 \
    --batch-size $MICRO \
    --train-iters 250000 \
    --lr 1.2e-4 \
    --min-lr 1.2e-5 \
    --lr-decay-style cosine \
    --weight-decay 0.1 \
    --clip-grad 1.0 \
    --fp16 \
    --checkpoint-activations \
    --activations-checkpoint-method uniform \
    --activations-checkpoint-num-layers 2 \
    --deepspeed \
    --deepspeed_config $DS_CONFIG \
    --zero-stage 1 \
    --deepspeed-activation-checkpointing
