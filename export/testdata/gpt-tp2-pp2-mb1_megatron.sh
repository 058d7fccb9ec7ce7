# Megatron-LM launch arguments for model gpt, exported by autopar from gpt-tp2-pp2-mb1.plan.json.
# Plan: batch 8 in 1 micro-batches (1f1b), 2 pipeline stage(s):
#   stage 0: layers 0-0 on devices 0-1 as logical mesh (1, 2)
#   stage 1: layers 1-1 on devices 2-3 as logical mesh (1, 2)
#
# Megatron reads this plan as tensor parallel (column and row splits of the weights)
# inside each stage's mesh, data parallel across it, and one pipeline stage per submesh.
# note: stage 1 splits input labels (S1R) along the batch over the tensor-parallel group too, where Megatron replicates it; the weights' layout, which the arguments fix, is the same
# vocabulary: 64 entries; the tokenizer must have as many (Megatron pads the embedding to a multiple of
# --make-vocab-size-divisible-by × tensor-parallel size)
# world size 4 = tensor 2 × pipeline 2 × data 1; 1 micro-batches of 8 per data-parallel rank
MEGATRON_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 2
    --micro-batch-size 8
    --global-batch-size 8
    --num-layers 2
    --hidden-size 32
    --num-attention-heads 4
    --seq-length 16
    --max-position-embeddings 16
    --ffn-hidden-size 128
    --position-embedding-type learned_absolute
    --optimizer sgd
    --lr 0.1
    --sgd-momentum 0.9
    --weight-decay 0
)
# torchrun --nproc-per-node 4 pretrain_gpt.py "${MEGATRON_ARGS[@]}" (and your data and tokenizer arguments)
