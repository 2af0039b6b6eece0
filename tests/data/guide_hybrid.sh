python pretrain_gpt.py \
    --use-deepspeed \
    --deepspeed_config ds_config.json \
    --tensor-model-parallel-size 4 \
    --pipeline-model-parallel-size 2 \
    --num-layers 40 \
    --hidden-size 5120
