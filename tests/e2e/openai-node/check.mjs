// The official OpenAI Node client against `detaudit serve`: chat, completions, streaming, logprobs,
// models. Exits non-zero with a message on the first mismatch. Usage: node check.mjs BASE_URL
import OpenAI from "openai";

const client = new OpenAI({ baseURL: process.argv[2] + "/v1", apiKey: "unused", maxRetries: 0 });
const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };
const messages = [{ role: "user", content: "Once upon a time" }];

const chat = await client.chat.completions.create({
  model: "m", messages, max_tokens: 16, temperature: 0, seed: 42, logprobs: true, top_logprobs: 3 });
const text = chat.choices[0].message.content;
if (typeof text !== "string" || text.length === 0) fail("chat: no content");
const lp = chat.choices[0].logprobs?.content;
if (!Array.isArray(lp) || lp.length !== chat.usage.completion_tokens) fail("chat: logprobs per token missing");
if (lp[0].top_logprobs.length !== 3) fail("chat: top_logprobs should have 3 entries");
if (!chat.system_fingerprint?.startsWith("detaudit-")) fail("chat: system_fingerprint");

const again = await client.chat.completions.create({ model: "m", messages, max_tokens: 16, temperature: 0, seed: 42 });
if (again.choices[0].message.content !== text) fail("chat: a repeated request gave other text");

let streamed = "";
const stream = await client.chat.completions.create({ model: "m", messages, max_tokens: 16, temperature: 0, seed: 42, stream: true });
for await (const chunk of stream) streamed += chunk.choices[0]?.delta?.content ?? "";
if (streamed !== text) fail(`stream: ${JSON.stringify(streamed)} != ${JSON.stringify(text)}`);

const comp = await client.completions.create({ model: "m", prompt: "Once upon a time", max_tokens: 16, temperature: 0, logprobs: 2 });
if (!comp.choices[0].text) fail("completions: no text");
if (comp.choices[0].logprobs?.tokens?.length !== comp.usage.completion_tokens) fail("completions: logprobs.tokens");

const models = await client.models.list();
if (models.data.length !== 1) fail("models: expected one model");
console.log(`ok: chat ${JSON.stringify(text)}, ${lp.length} logprob steps, streaming identical, completions and models`);
