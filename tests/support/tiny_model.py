"""Build a tiny randomly initialised Llama and a locally trained BPE tokenizer with a chat template.

vLLM's CPU build loads it like any Hugging Face checkpoint, so tests exercise the real generation path without
downloading weights. Sizes follow what the CPU attention kernels accept (head_dim 64; 16 is rejected).
"""

from __future__ import annotations

from pathlib import Path

# The template renders reasoning effort the way the recipe passes it (chat_template_kwargs), so a test can check
# that the setting reaches the prompt.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% if reasoning_effort is defined %}<|system|>Reasoning: {{ reasoning_effort }}\n{% endif %}"
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)

SPECIAL_TOKENS = ["<unk>", "<s>", "</s>", "<pad>", "<|system|>", "<|user|>", "<|assistant|>"]

TRAINING_TEXT = [
    "Solve the following math problem step by step. The last line of your response should be of the form "
    "Answer: $Answer (without quotes) where $Answer is the answer to the problem.",
    "Remember to put your answer on its own line after \"Answer:\".",
    "Find the sum of all integer bases b > 9 for which 17_b is a divisor of 97_b.",
    "Answer: 70 Answer: 588 Answer: 16 0123456789 + - * / = ( ) { } \\frac \\sqrt ^ _ $ .",
    "Let x be a real number such that x^2 + 2x + 1 = 0. Compute the value of x.",
    "Reasoning: minimal low medium high",
]


def build_tiny_model(
    out_dir: str | Path,
    *,
    seed: int = 0,
    taught_answers: dict[str, str] | None = None,
    taught_prompts: list[str] | None = None,
) -> Path:
    """Write a tiny Llama (hidden 128, 2 heads, 2 layers) and its tokenizer to `out_dir`; returns the path.

    With `taught_answers` ({reasoning_effort: answer}), the random model is first trained for a few seconds to
    reply "Answer: <answer>" to `taught_prompts` rendered through the chat template with that reasoning effort
    (until each reply's probability is measured >= TAUGHT_REPLY_MIN_PROBABILITY),
    so a test can tell correct from wrong grading end to end (a purely random model never writes an answer
    line) and can see the reasoning effort reach the template.
    """
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)

    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(TRAINING_TEXT, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        pad_token="<pad>",
        additional_special_tokens=SPECIAL_TOKENS[4:],
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(out)

    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config)
    if taught_answers:
        # Deterministic on CPU: fixed seed, fixed order, measured until certain. One torch thread: beside the other
        # pytest process of tools/run_tests.sh, two OpenMP threads spinning over two shared cores made it ten times
        # slower (25 s alone, 277 s beside vLLM).
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            _teach(model, tokenizer, taught_answers, taught_prompts or TRAINING_TEXT[:3])
        finally:
            torch.set_num_threads(threads)
    model.save_pretrained(out, safe_serialization=True)
    return out


# Each taught reply must have at least this probability, measured as the product of its token probabilities
# (teacher forcing): at temperature 1.0 a sample then differs from it at most once in a thousand draws, and greedy
# decoding writes it for certain.
TAUGHT_REPLY_MIN_PROBABILITY = 0.999


def _teach(model, tokenizer, answers: dict[str, str], prompts: list[str], *, check_every: int = 50,
           max_steps: int = 3000) -> float:
    """Supervised training on "<effort, prompt> -> Answer: <answer></s>" until every taught reply has probability
    >= TAUGHT_REPLY_MIN_PROBABILITY; returns the lowest reply probability reached. Raises if it is not reached
    within max_steps, so a test never runs on a model that only sometimes says what it was taught."""
    import torch

    sequences = []
    for reasoning_effort, answer in answers.items():
        answer_ids = tokenizer(f"Answer: {answer}", add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for prompt in prompts:
            rendered = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}],
                tokenize=False,
                add_generation_prompt=True,
                reasoning_effort=reasoning_effort,
            )
            prompt_ids = tokenizer(rendered, add_special_tokens=False)["input_ids"]
            ids = torch.tensor([prompt_ids + answer_ids])
            labels = ids.clone()
            labels[0, : len(prompt_ids)] = -100  # learn the reply, not the prompt
            sequences.append((ids, labels))

    def lowest_reply_probability() -> float:
        model.eval()
        with torch.no_grad():
            # loss is the mean negative log-likelihood over the reply's tokens: times their count, the whole reply's.
            return min(
                float(torch.exp(-model(input_ids=ids, labels=labels).loss * int((labels[0, 1:] != -100).sum())))
                for ids, labels in sequences
            )

    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    lowest = 0.0
    for step in range(max_steps):
        if step % check_every == 0:
            lowest = lowest_reply_probability()
            if lowest >= TAUGHT_REPLY_MIN_PROBABILITY:
                break
        model.train()
        ids, labels = sequences[step % len(sequences)]
        loss = model(input_ids=ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    else:
        lowest = lowest_reply_probability()
    model.eval()
    if lowest < TAUGHT_REPLY_MIN_PROBABILITY:
        raise RuntimeError(f"tiny model: a taught reply has probability {lowest:.4f} after {max_steps} steps, "
                           f"below {TAUGHT_REPLY_MIN_PROBABILITY}")
    return lowest


def build_lora_adapter(out_dir: str | Path, base_model_dir: str | Path, *, rank: int = 8, scale: float = 1.0,
                       seed: int = 1) -> Path:
    """Write a random PEFT-format LoRA adapter (q/k/v/o projections) for the tiny model; returns the path.

    lora_B is non-zero (unlike a freshly initialised PEFT adapter), so applying the adapter visibly changes
    the model's replies.
    """
    import json

    import torch
    from safetensors.torch import save_file
    from transformers import AutoConfig

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    config = AutoConfig.from_pretrained(base_model_dir)
    hidden = config.hidden_size
    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for layer in range(config.num_hidden_layers):
        for projection in ("q_proj", "k_proj", "v_proj", "o_proj"):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{projection}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=generator) * scale
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(hidden, rank, generator=generator) * scale
    save_file(tensors, str(out / "adapter_model.safetensors"))
    (out / "adapter_config.json").write_text(json.dumps({
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": str(Path(base_model_dir).resolve()),
        "r": rank,
        "lora_alpha": rank,
        "lora_dropout": 0.0,
        "bias": "none",
        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"],
        "fan_in_fan_out": False,
    }, indent=2))
    return out
