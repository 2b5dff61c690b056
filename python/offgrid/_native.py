"""ctypes declarations of include/offgrid.h and the loading of liboffgrid.so.

The library is found, in order: $OFFGRID_LIBRARY (a path), next to this package, in the build/ folder of the
source tree this package sits in, then by the system's search (ctypes.util.find_library("offgrid")).
"""
import ctypes
import ctypes.util
import os

OK = 0
BUFFER_TOO_SMALL = 7

c_int32_p = ctypes.POINTER(ctypes.c_int32)
c_size_p = ctypes.POINTER(ctypes.c_size_t)


class ContextParams(ctypes.Structure):
    _fields_ = [
        ("n_ctx", ctypes.c_uint32),
        ("n_batch", ctypes.c_uint32),
        ("n_ubatch", ctypes.c_uint32),
        ("n_seq_max", ctypes.c_uint32),
        ("n_threads", ctypes.c_int32),
        ("embeddings", ctypes.c_int32),
        ("pooling", ctypes.c_int32),
        ("type_k", ctypes.c_char_p),
        ("type_v", ctypes.c_char_p),
    ]


class SamplerParams(ctypes.Structure):
    _fields_ = [
        ("temperature", ctypes.c_float),
        ("top_k", ctypes.c_int32),
        ("top_p", ctypes.c_float),
        ("min_p", ctypes.c_float),
        ("repeat_penalty", ctypes.c_float),
        ("frequency_penalty", ctypes.c_float),
        ("presence_penalty", ctypes.c_float),
        ("repeat_last_n", ctypes.c_int32),
        ("seed", ctypes.c_uint64),
    ]


class ChatMessage(ctypes.Structure):
    _fields_ = [("role", ctypes.c_char_p), ("content", ctypes.c_char_p)]


class BatchToken(ctypes.Structure):
    _fields_ = [
        ("token", ctypes.c_int32),
        ("pos", ctypes.c_int32),
        ("seq", ctypes.c_int32),
        ("output", ctypes.c_int32),
    ]


def _candidates():
    env = os.environ.get("OFFGRID_LIBRARY")
    if env:
        yield env
        return
    here = os.path.dirname(os.path.abspath(__file__))
    yield os.path.join(here, "liboffgrid.so")
    yield os.path.join(here, "..", "..", "build", "liboffgrid.so")
    found = ctypes.util.find_library("offgrid")
    if found:
        yield found


def _load():
    tried = []
    for path in _candidates():
        if os.path.sep in path and not os.path.exists(path):
            tried.append(path)
            continue
        try:
            return ctypes.CDLL(path)
        except OSError as e:
            tried.append("%s (%s)" % (path, e))
    raise ImportError("offgrid: liboffgrid.so not found (set OFFGRID_LIBRARY); tried: " + ", ".join(tried))


def _declare(lib):
    P = ctypes.c_void_p
    S = ctypes.c_int  # offgrid_status
    sig = {
        "offgrid_last_error": (ctypes.c_char_p, []),
        "offgrid_clear_error": (None, []),
        "offgrid_status_name": (ctypes.c_char_p, [S]),
        "offgrid_version": (ctypes.c_char_p, []),
        "offgrid_isa": (ctypes.c_char_p, []),
        "offgrid_set_activation_mode": (S, [ctypes.c_char_p]),
        "offgrid_activation_mode": (ctypes.c_char_p, []),
        "offgrid_set_expert_rows16": (None, [ctypes.c_int]),
        "offgrid_expert_rows16": (ctypes.c_int, []),
        "offgrid_model_load": (S, [ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(P)]),
        "offgrid_model_free": (None, [P]),
        "offgrid_model_n_vocab": (ctypes.c_int32, [P]),
        "offgrid_model_n_embd": (ctypes.c_int32, [P]),
        "offgrid_model_n_ctx_train": (ctypes.c_int64, [P]),
        "offgrid_model_describe": (S, [P, ctypes.c_char_p, ctypes.c_size_t, c_size_p]),
        "offgrid_tokenizer_from_model": (S, [P, ctypes.POINTER(P)]),
        "offgrid_tokenizer_free": (None, [P]),
        "offgrid_tokenizer_n_vocab": (ctypes.c_int32, [P]),
        "offgrid_tokenizer_bos": (ctypes.c_int32, [P]),
        "offgrid_tokenizer_eos": (ctypes.c_int32, [P]),
        "offgrid_tokenizer_add_bos": (ctypes.c_int, [P]),
        "offgrid_tokenizer_is_end_of_generation": (ctypes.c_int, [P, ctypes.c_int32]),
        "offgrid_tokenize": (S, [P, ctypes.c_char_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, c_int32_p,
                                 ctypes.c_size_t, c_size_p]),
        "offgrid_detokenize": (S, [P, c_int32_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_char_p, ctypes.c_size_t,
                                   c_size_p]),
        "offgrid_utf8_complete_prefix": (ctypes.c_size_t, [ctypes.c_char_p, ctypes.c_size_t]),
        "offgrid_chat_render": (S, [P, ctypes.POINTER(ChatMessage), ctypes.c_size_t, c_int32_p, ctypes.c_size_t,
                                    c_size_p]),
        "offgrid_context_default_params": (ContextParams, []),
        "offgrid_context_new": (S, [P, ctypes.POINTER(ContextParams), ctypes.POINTER(P)]),
        "offgrid_context_free": (None, [P]),
        "offgrid_context_params_of": (ContextParams, [P]),
        "offgrid_decode": (S, [P, ctypes.POINTER(BatchToken), ctypes.c_size_t]),
        "offgrid_decode_tokens": (S, [P, c_int32_p, ctypes.c_size_t, ctypes.c_int32]),
        "offgrid_n_outputs": (ctypes.c_int32, [P]),
        "offgrid_logits": (ctypes.POINTER(ctypes.c_float), [P, ctypes.c_int32]),
        "offgrid_embed": (S, [P, c_int32_p, ctypes.c_size_t, ctypes.c_int32, ctypes.c_int,
                              ctypes.POINTER(ctypes.c_float), ctypes.c_size_t]),
        "offgrid_seq_rm": (S, [P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]),
        "offgrid_seq_cp": (S, [P, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32, ctypes.c_int32]),
        "offgrid_seq_pos_max": (ctypes.c_int32, [P, ctypes.c_int32]),
        "offgrid_clear": (None, [P]),
        "offgrid_state_save_file": (S, [P, ctypes.c_char_p, ctypes.c_int32, c_int32_p, ctypes.c_size_t]),
        "offgrid_state_load_file": (S, [P, ctypes.c_char_p, ctypes.c_int32, ctypes.POINTER(c_int32_p), c_size_p]),
        "offgrid_tokens_free": (None, [c_int32_p]),
        "offgrid_sampler_default_params": (SamplerParams, []),
        "offgrid_sampler_new": (S, [ctypes.POINTER(SamplerParams), ctypes.POINTER(P)]),
        "offgrid_sampler_free": (None, [P]),
        "offgrid_sampler_sample": (S, [P, P, ctypes.c_int32, c_int32_p]),
        "offgrid_sampler_sample_logits": (S, [P, ctypes.POINTER(ctypes.c_float), ctypes.c_size_t, c_int32_p]),
        "offgrid_sampler_accept": (None, [P, ctypes.c_int32]),
        "offgrid_sampler_reset": (None, [P]),
    }
    for name, (restype, argtypes) in sig.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _declare(_load())


class OffgridError(Exception):
    """A failed call: `status` (an int of offgrid_status), `status_name` and the library's message."""

    def __init__(self, status, message):
        self.status = status
        self.status_name = lib.offgrid_status_name(status).decode()
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


def check(status):
    if status != OK:
        raise OffgridError(status, lib.offgrid_last_error().decode("utf-8", "replace"))


def int32_array(values):
    values = list(values)
    return (ctypes.c_int32 * len(values))(*values), len(values)
