"""offgrid from Python: load a GGUF model, tokenize, generate (streaming), embed, save and restore state.

A thin ctypes binding of the C interface (include/offgrid.h, liboffgrid.so); see docs/api.md.

    import offgrid
    model = offgrid.Model("tiny.gguf")
    ctx = offgrid.Context(model, n_ctx=2048)
    for piece in ctx.generate("Once upon a time", max_tokens=32, temperature=0):
        print(piece, end="", flush=True)

Thread safety follows the C interface: a Model and its Tokenizer may be shared by threads; a Context and a
Sampler are used by one thread at a time.
"""
import ctypes

from ._native import (BUFFER_TOO_SMALL, BatchToken, ChatMessage, ContextParams, OffgridError, SamplerParams,
                      check, int32_array, lib)

__all__ = ["Model", "Tokenizer", "Context", "Sampler", "OffgridError", "version", "isa", "set_activation_mode",
           "activation_mode", "set_expert_rows16", "expert_rows16"]

_WEIGHT_LOAD = {"auto": 0, "map": 1, "read": 2}
_POOLING = {"none": 0, "mean": 1, "last": 2, "cls": 3}


def version():
    return lib.offgrid_version().decode()


def isa():
    """The kernel level in use: "scalar", "avx2", "avx512", "amx", "neon" or "neondot"."""
    return lib.offgrid_isa().decode()


def set_activation_mode(mode):
    """How quantised weights multiply, for the whole process, before the first model: "int16" (the default),
    "int8" (the speed path: prompts on the tile unit where the CPU has AMX) or "f32" (exact)."""
    check(lib.offgrid_set_activation_mode(_as_bytes(mode)))


def activation_mode():
    return lib.offgrid_activation_mode().decode()


def set_expert_rows16(on):
    """The q4_K experts' matrices in 16-row groups at load (a copy: their memory twice): with "int8" on AVX-512
    VNNI a decode step's expert products run faster, with the same results. Before loading a model."""
    lib.offgrid_set_expert_rows16(1 if on else 0)


def expert_rows16():
    """True when set_expert_rows16 is on and takes effect on this machine and mode."""
    return lib.offgrid_expert_rows16() != 0


def _as_bytes(text):
    return text.encode("utf-8") if isinstance(text, str) else bytes(text)


def _fill_ids(call):
    """Runs call(buffer, capacity, n_out) with the C interface's size protocol and returns the ids."""
    n = ctypes.c_size_t(0)
    status = call(None, 0, ctypes.byref(n))
    if status == BUFFER_TOO_SMALL:
        buf = (ctypes.c_int32 * n.value)()
        check(call(buf, n.value, ctypes.byref(n)))
        return list(buf[: n.value])
    check(status)
    return []


class _Handle:
    """Owns one C handle: `_free` names the offgrid_*_free function; close() (or the end of a `with`, or garbage
    collection) releases it once."""

    _free = None

    def close(self):
        if getattr(self, "_h", None):
            getattr(lib, self._free)(self._h)
            self._h = ctypes.c_void_p()

    def __del__(self):
        self.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Model(_Handle):
    """A loaded GGUF model. weight_load: "auto", "map" or "read" (into memory; faster decode)."""

    def __init__(self, path, weight_load="auto"):
        if weight_load not in _WEIGHT_LOAD:
            raise ValueError("weight_load must be one of " + ", ".join(_WEIGHT_LOAD))
        self._h = ctypes.c_void_p()
        check(lib.offgrid_model_load(str(path).encode(), _WEIGHT_LOAD[weight_load], ctypes.byref(self._h)))
        self.path = str(path)
        self._tokenizer = None

    _free = "offgrid_model_free"

    @property
    def n_vocab(self):
        return lib.offgrid_model_n_vocab(self._h)

    @property
    def n_embd(self):
        return lib.offgrid_model_n_embd(self._h)

    @property
    def n_ctx_train(self):
        return lib.offgrid_model_n_ctx_train(self._h)

    def describe(self):
        n = ctypes.c_size_t(0)
        lib.offgrid_model_describe(self._h, None, 0, ctypes.byref(n))
        buf = ctypes.create_string_buffer(n.value + 1)
        check(lib.offgrid_model_describe(self._h, buf, len(buf), ctypes.byref(n)))
        return buf.value.decode("utf-8", "replace")

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            self._tokenizer = Tokenizer(self)
        return self._tokenizer

    def tokenize(self, text, add_bos=False, parse_special=False):
        return self.tokenizer.tokenize(text, add_bos, parse_special)

    def detokenize(self, ids, render_special=True, errors="replace"):
        return self.tokenizer.detokenize(ids, render_special, errors)


class Tokenizer(_Handle):
    """The model's tokenizer (immutable; keeps the model's weights alive while it lives)."""

    def __init__(self, model):
        self._h = ctypes.c_void_p()
        check(lib.offgrid_tokenizer_from_model(model._h, ctypes.byref(self._h)))

    _free = "offgrid_tokenizer_free"

    @property
    def n_vocab(self):
        return lib.offgrid_tokenizer_n_vocab(self._h)

    @property
    def bos(self):
        t = lib.offgrid_tokenizer_bos(self._h)
        return None if t < 0 else t

    @property
    def eos(self):
        t = lib.offgrid_tokenizer_eos(self._h)
        return None if t < 0 else t

    @property
    def add_bos(self):
        return bool(lib.offgrid_tokenizer_add_bos(self._h))

    def is_end_of_generation(self, token):
        return bool(lib.offgrid_tokenizer_is_end_of_generation(self._h, token))

    def tokenize(self, text, add_bos=False, parse_special=False):
        """Token ids of text (str or bytes); add_bos: BOS first when the model's prompts start with it."""
        data = _as_bytes(text)
        return _fill_ids(lambda buf, cap, n: lib.offgrid_tokenize(self._h, data, len(data), int(add_bos),
                                                                  int(parse_special), buf, cap, n))

    def detokenize_bytes(self, ids, render_special=True):
        arr, count = int32_array(ids)
        n = ctypes.c_size_t(0)
        status = lib.offgrid_detokenize(self._h, arr, count, int(render_special), None, 0, ctypes.byref(n))
        if status != BUFFER_TOO_SMALL:
            check(status)
            return b""
        buf = ctypes.create_string_buffer(n.value)
        check(lib.offgrid_detokenize(self._h, arr, count, int(render_special), buf, n.value, ctypes.byref(n)))
        return buf.raw[: n.value]

    def detokenize(self, ids, render_special=True, errors="replace"):
        return self.detokenize_bytes(ids, render_special).decode("utf-8", errors)

    def chat(self, messages):
        """ChatML prompt tokens of [{"role": ..., "content": ...}, ...], the assistant's turn opened."""
        keep = [(_as_bytes(m["role"]), _as_bytes(m["content"])) for m in messages]
        arr = (ChatMessage * len(keep))(*[ChatMessage(r, c) for r, c in keep])
        return _fill_ids(lambda buf, cap, n: lib.offgrid_chat_render(self._h, arr, len(keep), buf, cap, n))


class Sampler(_Handle):
    """The sampling chain (penalties, top-k, top-p, min-p, temperature; temperature <= 0 is greedy)."""

    def __init__(self, temperature=0.8, top_k=40, top_p=0.95, min_p=0.05, repeat_penalty=1.0,
                 frequency_penalty=0.0, presence_penalty=0.0, repeat_last_n=64, seed=0):
        p = SamplerParams(temperature, top_k, top_p, min_p, repeat_penalty, frequency_penalty, presence_penalty,
                          repeat_last_n, seed)
        self._h = ctypes.c_void_p()
        check(lib.offgrid_sampler_new(ctypes.byref(p), ctypes.byref(self._h)))

    _free = "offgrid_sampler_free"

    def sample(self, ctx, i=-1):
        """A token from output row i of the context's last decode (not yet accepted)."""
        t = ctypes.c_int32(0)
        check(lib.offgrid_sampler_sample(self._h, ctx._h, i, ctypes.byref(t)))
        return t.value

    def accept(self, token):
        lib.offgrid_sampler_accept(self._h, token)

    def reset(self):
        lib.offgrid_sampler_reset(self._h)


class Context(_Handle):
    """Decoding state over a model: the caches of up to n_seq_max sequences.

    `tokens` lists the tokens of sequence 0 as generate() and load_state() leave them: the memory holds all of
    them except, after a generation, the last one sampled (decoded by the next generate()).
    """

    def __init__(self, model, n_ctx=0, n_batch=2048, n_ubatch=512, n_seq_max=1, n_threads=1, embeddings=False,
                 pooling="mean", type_k="f16", type_v="f16"):
        if pooling not in _POOLING:
            raise ValueError("pooling must be one of " + ", ".join(_POOLING))
        p = ContextParams(n_ctx, n_batch, n_ubatch, n_seq_max, n_threads, int(embeddings), _POOLING[pooling],
                          type_k.encode(), type_v.encode())
        self._h = ctypes.c_void_p()
        check(lib.offgrid_context_new(model._h, ctypes.byref(p), ctypes.byref(self._h)))
        self.model = model
        self.tokenizer = model.tokenizer
        self.tokens = []
        self._logits_follow_tokens = False  # the last decode's last row belongs to tokens[-1]

    _free = "offgrid_context_free"

    @property
    def n_ctx(self):
        return lib.offgrid_context_params_of(self._h).n_ctx

    @property
    def n_batch(self):
        return lib.offgrid_context_params_of(self._h).n_batch

    def decode(self, tokens, seq=0):
        """Appends tokens to sequence seq (in n_batch chunks); the logits of the last one are kept. Tokens of
        sequence 0 join `tokens`."""
        tokens = list(tokens)
        if seq == 0 and len(self.tokens) != self.seq_pos_max(0) + 1:
            raise OffgridError(1, "a generated token is pending: continue with generate()")
        self._decode(tokens, seq)
        if seq == 0:
            self.tokens.extend(tokens)
        self._logits_follow_tokens = seq == 0 and bool(tokens)

    def _decode(self, tokens, seq):
        self._logits_follow_tokens = False
        step = self.n_batch
        for i in range(0, len(tokens), step):
            arr, count = int32_array(tokens[i:i + step])
            check(lib.offgrid_decode_tokens(self._h, arr, count, seq))

    def decode_batch(self, batch):
        """One decode call of (token, pos, seq, output) tuples; pos < 0 is the sequence's next position."""
        arr = (BatchToken * len(batch))(*[BatchToken(t, p, s, int(o)) for t, p, s, o in batch])
        self._logits_follow_tokens = False
        check(lib.offgrid_decode(self._h, arr, len(batch)))

    def logits(self, i=-1):
        row = lib.offgrid_logits(self._h, i)
        if not row:
            check(1)  # the library's message says which row
        return row[: self.model.n_vocab]

    def seq_pos_max(self, seq=0):
        return lib.offgrid_seq_pos_max(self._h, seq)

    def seq_rm(self, seq, p0=-1, p1=-1):
        self._logits_follow_tokens = False
        check(lib.offgrid_seq_rm(self._h, seq, p0, p1))
        if seq in (0, -1):
            self.tokens = self.tokens[: self.seq_pos_max(0) + 1]

    def clear(self):
        lib.offgrid_clear(self._h)
        self.tokens = []
        self._logits_follow_tokens = False

    def embed(self, text, normalize=True, seq=0):
        """The embedding of a text (str, bytes or token ids) on an embeddings=True context: mean-pooled (or the
        context's pooling), unit length when normalize. Sequence seq must be empty; it is empty again after."""
        ids = list(text) if isinstance(text, (list, tuple)) else self.tokenizer.tokenize(text)
        arr, count = int32_array(ids)
        out = (ctypes.c_float * self.model.n_embd)()
        self._logits_follow_tokens = False
        check(lib.offgrid_embed(self._h, arr, count, seq, int(normalize), out, len(out)))
        return list(out)

    def generate(self, prompt="", max_tokens=128, sampler=None, errors="replace", **sampling):
        """Streams the generated text piece by piece (an iterator of str) on sequence 0.

        Continues from `tokens` (a previous generation, a loaded state or tokens given to decode(); with an empty
        prompt after decode() it samples from the last decoded token's logits): a fresh context starts the prompt
        with BOS when the model asks for it. Stops after max_tokens (< 0: no limit), at an end-of-generation token or
        when the context is full. Pieces never split a UTF-8 character; bytes that are not UTF-8 are decoded
        with `errors` (errors="surrogateescape" gives back the exact bytes). Sampling: a Sampler, or Sampler's
        keyword arguments (temperature=0 is greedy).
        """
        if sampler is None:
            sampler = Sampler(**sampling)
        elif sampling:
            raise TypeError("give a sampler or sampling arguments, not both")
        in_memory = self.seq_pos_max(0) + 1
        pending = self.tokens[in_memory:]
        if len(pending) > 1 or len(self.tokens) < in_memory:
            raise OffgridError(1, "Context.tokens (%d) does not match the memory (%d tokens)" %
                               (len(self.tokens), in_memory))
        fresh = not self.tokens
        to_decode = pending + self.tokenizer.tokenize(prompt, add_bos=fresh)
        if not to_decode and self._logits_follow_tokens:
            # Tokens decoded by decode(): sample from their last row.
            self._logits_follow_tokens = False
            for t in self.tokens:
                sampler.accept(t)
            return self._stream(sampler, max_tokens, errors)
        if not to_decode:
            raise ValueError("the prompt is empty and nothing is pending")
        if len(self.tokens) - len(pending) + len(to_decode) > self.n_ctx:
            raise OffgridError(1, "the prompt does not fit the context of %d cells" % self.n_ctx)
        history = self.tokens[:in_memory]
        self._decode(to_decode, 0)
        self.tokens = history + to_decode
        for t in self.tokens:
            sampler.accept(t)
        return self._stream(sampler, max_tokens, errors)

    def _stream(self, sampler, max_tokens, errors):
        pending = b""
        n = 0
        while max_tokens < 0 or n < max_tokens:
            token = sampler.sample(self)
            sampler.accept(token)
            self.tokens.append(token)
            n += 1
            if self.tokenizer.is_end_of_generation(token):
                break
            pending += self.tokenizer.detokenize_bytes([token], render_special=False)
            ready = lib.offgrid_utf8_complete_prefix(pending, len(pending))
            if ready:
                yield pending[:ready].decode("utf-8", errors)
                pending = pending[ready:]
            if (max_tokens >= 0 and n >= max_tokens) or len(self.tokens) > self.n_ctx:
                break
            self._decode([token], 0)
        if pending:
            yield pending.decode("utf-8", errors)

    def save_state(self, path, seq=-1):
        """Writes the memory and `tokens` to a state file (the format of `offgrid run --state-save`)."""
        arr, count = int32_array(self.tokens)
        check(lib.offgrid_state_save_file(self._h, str(path).encode(), seq, arr, count))

    def load_state(self, path, seq=-1):
        """Restores a state file of the same model; returns its token list, which becomes `tokens`."""
        ptr = ctypes.POINTER(ctypes.c_int32)()
        n = ctypes.c_size_t(0)
        self._logits_follow_tokens = False
        check(lib.offgrid_state_load_file(self._h, str(path).encode(), seq, ctypes.byref(ptr), ctypes.byref(n)))
        try:
            self.tokens = list(ptr[: n.value]) if n.value else []
        finally:
            lib.offgrid_tokens_free(ptr)
        return list(self.tokens)
