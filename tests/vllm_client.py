"""Runs inside the vLLM environment for tests/test_vllm.py: the `openai`
client against a `vllm serve` on tpu, over HTTP.

    python tests/vllm_client.py URL MODEL OUT.json

It sends every request the server tests judge and writes what came back
(token ids, finish reasons, errors' status codes); the test compares them
with the offline engine's tokens.
"""
import asyncio
import json
import sys

from vllm_generate import WORDS, prompts

GREEDY = dict(temperature=0.0, max_tokens=12, extra_body={"ignore_eos": True, "return_token_ids": True})
SAMPLED = dict(temperature=1.0, top_p=0.9, max_tokens=12,
               extra_body={"top_k": 50, "min_p": 0.01, "ignore_eos": True, "return_token_ids": True})


async def stream(client, model, prompt):
    """One streamed completion: its token ids, chunk by chunk, and how it ended."""
    tokens, finish, chunks = [], None, 0
    async for chunk in await client.completions.create(model=model, prompt=prompt, stream=True,
                                                       **GREEDY):
        choice = chunk.choices[0]
        tokens += choice.token_ids or []
        finish = choice.finish_reason or finish
        chunks += 1
    return {"tokens": tokens, "finish": finish, "chunks": chunks}


async def status_of(call):
    """The HTTP status a bad request gets (the openai client raises it)."""
    import openai
    try:
        await call
    except openai.APIStatusError as e:
        return {"status": e.status_code, "message": str(e)[:300]}
    return {"status": 200}


async def main(url, model):
    import openai
    client = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="none", max_retries=0, timeout=600)
    out = {}
    batch = [prompts()[i % 10] for i in range(32)]
    out["streams"] = await asyncio.gather(*(stream(client, model, p) for p in batch))
    one = await client.completions.create(model=model, prompt=prompts()[1], **GREEDY)
    out["completion"] = {"tokens": one.choices[0].token_ids,
                         "prompt_tokens": one.usage.prompt_tokens}

    messages = [{"role": "system", "content": " ".join(WORDS[:5])},
                {"role": "user", "content": " ".join(WORDS[10:30])}]
    chat = await client.chat.completions.create(model=model, messages=messages, **GREEDY)
    rendered = " ".join(f"<s> {m['content']} </s>" for m in messages) + " <s>"
    plain = await client.completions.create(model=model, prompt=rendered, **GREEDY)
    out["chat"] = {"tokens": chat.choices[0].token_ids, "prompt_tokens": chat.usage.prompt_tokens,
                   "role": chat.choices[0].message.role,
                   "rendered_tokens": plain.choices[0].token_ids,
                   "rendered_prompt_tokens": plain.usage.prompt_tokens}

    # A seeded sampled request, twice, and once with another seed.
    seeded = [await client.completions.create(model=model, prompt=prompts()[3], seed=seed, **SAMPLED)
              for seed in (7, 7, 8)]
    out["seeded"] = [r.choices[0].token_ids for r in seeded]

    too_long = " ".join(WORDS[i % 250] for i in range(300))
    out["bad"] = {
        "too_long": await status_of(client.completions.create(model=model, prompt=too_long, **GREEDY)),
        "temperature": await status_of(client.completions.create(
            model=model, prompt=prompts()[0], temperature=-1.0, max_tokens=4)),
        "top_p": await status_of(client.completions.create(
            model=model, prompt=prompts()[0], top_p=1.5, max_tokens=4)),
    }
    after = await client.completions.create(model=model, prompt=prompts()[1], **GREEDY)
    out["after_bad"] = after.choices[0].token_ids
    await client.close()
    return out


if __name__ == "__main__":
    result = asyncio.run(main(sys.argv[1], sys.argv[2]))
    with open(sys.argv[3], "w") as f:
        json.dump(result, f)
