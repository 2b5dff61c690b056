"""The Python package against the command line: the same greedy text as `offgrid run`, streaming, tokenizer
round trips, embeddings, state files readable by both, and errors as exceptions.

Needs OFFGRID_BINARY (the built `offgrid`, used to generate a tiny model and as the reference) and the library
(OFFGRID_LIBRARY or the default search); ctest sets both. Skips when either is missing.
"""
import math
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

BINARY = os.environ.get("OFFGRID_BINARY", "")
try:
    import offgrid
    IMPORT_ERROR = None
except ImportError as e:  # the shared library is not built or not found
    offgrid = None
    IMPORT_ERROR = str(e)


def run(*args):
    """`offgrid ARGS`: stdout as bytes; fails the test on a non-zero exit."""
    # A sanitized build preloads the sanitizer runtime for the library (python/CMakeLists.txt); the offgrid
    # executable carries its own and refuses a second one.
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    r = subprocess.run([BINARY, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                       env=env)
    if r.returncode != 0:
        raise AssertionError("offgrid %s failed: %s" % (" ".join(args), r.stderr.decode(errors="replace")))
    return r.stdout


# A library named by OFFGRID_LIBRARY (as ctest does) that fails to load is a failure, not a skip.
@unittest.skipIf(offgrid is None and not os.environ.get("OFFGRID_LIBRARY"),
                 "offgrid package not importable: %s" % IMPORT_ERROR)
@unittest.skipUnless(BINARY and os.path.exists(BINARY), "OFFGRID_BINARY (the built offgrid) is not set")
class OffgridPython(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if offgrid is None:
            raise AssertionError("OFFGRID_LIBRARY is set but the package does not load: %s" % IMPORT_ERROR)
        cls.dir = tempfile.mkdtemp(prefix="offgrid_python_")
        cls.path = os.path.join(cls.dir, "tiny.gguf")
        run("gen-model", "-o", cls.path)
        cls.model = offgrid.Model(cls.path)

    @classmethod
    def tearDownClass(cls):
        cls.model.close()
        shutil.rmtree(cls.dir, ignore_errors=True)

    def generate_bytes(self, ctx, prompt, n):
        pieces = list(ctx.generate(prompt, max_tokens=n, temperature=0, errors="surrogateescape"))
        return "".join(pieces).encode("utf-8", "surrogateescape")

    def test_greedy_text_equals_offgrid_run(self):
        for prompt, n in [("Hello there", 24), ("The cabin stands at the end of a long gravel road, where", 40),
                          ("\u00e9t\u00e9 \u65e5\u672c", 16)]:
            with self.subTest(prompt=prompt, n=n):
                expected = run("run", "-m", self.path, "-p", prompt, "-n", str(n), "--temp", "0", "-t", "1")
                ctx = offgrid.Context(self.model)
                self.assertEqual(self.generate_bytes(ctx, prompt, n) + b"\n", expected)

    def test_generation_streams_as_an_iterator(self):
        ctx = offgrid.Context(self.model, n_ctx=256)
        it = ctx.generate("Streaming", max_tokens=12, temperature=0)
        self.assertIs(iter(it), it)
        first = next(it)
        self.assertIsInstance(first, str)
        # Each step decodes one token: after the first piece the context holds less than the full run.
        partial = len(ctx.tokens)
        rest = list(it)
        self.assertGreater(len(ctx.tokens), partial)
        whole = offgrid.Context(self.model, n_ctx=256)
        self.assertEqual(first + "".join(rest), "".join(whole.generate("Streaming", max_tokens=12, temperature=0)))

    def test_seeded_sampling_is_reproducible(self):
        def sampled():
            pieces = offgrid.Context(self.model).generate("Seeds", max_tokens=16, seed=7, errors="surrogateescape")
            return "".join(pieces).encode("utf-8", "surrogateescape")
        a = sampled()
        self.assertEqual(sampled(), a)
        # The default chain (temperature 0.8, top-k 40, top-p 0.95, min-p 0.05) draws what `offgrid run` draws.
        self.assertEqual(a + b"\n", run("run", "-m", self.path, "-p", "Seeds", "-n", "16", "-s", "7", "-t", "1"))

    def test_decoded_tokens_continue_into_generation(self):
        # A prompt decoded by hand, then generate("") continues it exactly as generate(prompt) does.
        prompt = "Hand decoded"
        by_hand = offgrid.Context(self.model, n_ctx=256)
        by_hand.decode(self.model.tokenize(prompt, add_bos=True))
        self.assertEqual(by_hand.tokens, self.model.tokenize(prompt, add_bos=True))
        direct = offgrid.Context(self.model, n_ctx=256)
        self.assertEqual("".join(by_hand.generate("", max_tokens=8, temperature=0)),
                         "".join(direct.generate(prompt, max_tokens=8, temperature=0)))
        self.assertEqual(by_hand.tokens, direct.tokens)

    def test_tokenize_round_trip(self):
        tok = self.model.tokenizer
        text = "plain words, caf\u00e9, \u65e5\u672c\u8a9e and <|im_end|> as text"
        ids = tok.tokenize(text)
        self.assertTrue(ids)
        self.assertTrue(all(0 <= i < self.model.n_vocab for i in ids))
        self.assertEqual(tok.detokenize(ids), text)
        raw = b"\xff\xfe\x00bytes"
        self.assertEqual(tok.detokenize_bytes(tok.tokenize(raw)), raw)
        with_bos = tok.tokenize(text, add_bos=True)
        self.assertEqual(len(with_bos), len(ids) + (1 if tok.add_bos and tok.bos is not None else 0))
        self.assertEqual(tok.tokenize(""), [])

    def test_chat_ends_with_the_assistant_turn_open(self):
        ids = self.model.tokenizer.chat([{"role": "user", "content": "hi"}])
        text = self.model.detokenize(ids)
        self.assertTrue(text.endswith("<|im_start|>assistant\n"), text)
        self.assertIn("<|im_start|>user\nhi<|im_end|>\n", text)

    def test_embeddings(self):
        ctx = offgrid.Context(self.model, n_ctx=256, embeddings=True)
        a = ctx.embed("an embedded text")
        self.assertEqual(len(a), self.model.n_embd)
        self.assertAlmostEqual(math.sqrt(sum(x * x for x in a)), 1.0, places=5)
        self.assertEqual(ctx.embed("an embedded text"), a)
        raw = ctx.embed("an embedded text", normalize=False)
        norm = math.sqrt(sum(x * x for x in raw))
        for x, y in zip(raw, a):
            self.assertAlmostEqual(x / norm, y, places=6)
        self.assertNotEqual(ctx.embed("something else entirely"), a)

    def test_state_files_continue_like_offgrid_run(self):
        # offgrid run writes a state after 8 tokens and continues it for 8 more; Python does the same, and each
        # reads the other's file.
        cli_state = os.path.join(self.dir, "cli.state")
        py_state = os.path.join(self.dir, "py.state")
        first = run("run", "-m", self.path, "-p", "Once", "-n", "8", "--temp", "0", "-t", "1", "--state-save", cli_state)
        second = run("run", "-m", self.path, "-p", "", "-n", "8", "--temp", "0", "-t", "1", "--state-load", cli_state)

        ctx = offgrid.Context(self.model)
        self.assertEqual(self.generate_bytes(ctx, "Once", 8) + b"\n", first)
        ctx.save_state(py_state)
        saved = list(ctx.tokens)

        restored = offgrid.Context(self.model)
        self.assertEqual(restored.load_state(cli_state), saved)
        self.assertEqual(self.generate_bytes(restored, "", 8) + b"\n", second)
        again = run("run", "-m", self.path, "-p", "", "-n", "8", "--temp", "0", "-t", "1", "--state-load", py_state)
        self.assertEqual(again, second)

    def test_kernel_choices(self):
        self.assertIn(offgrid.isa(), ("scalar", "avx2", "avx512", "amx", "neon", "neondot"))
        mode = offgrid.activation_mode()  # fixed by now (the test model was loaded)
        self.assertIn(mode, ("int16", "int8", "f32"))
        offgrid.set_activation_mode(mode)  # the mode in effect: accepted
        with self.assertRaises(offgrid.OffgridError) as e:
            offgrid.set_activation_mode("int8" if mode != "int8" else "int16")
        self.assertEqual(e.exception.status_name, "failed")
        with self.assertRaises(offgrid.OffgridError) as e:
            offgrid.set_activation_mode("int4")
        self.assertEqual(e.exception.status_name, "invalid argument")

    def test_errors_are_exceptions_with_the_library_message(self):
        missing = os.path.join(self.dir, "missing.gguf")
        with self.assertRaises(offgrid.OffgridError) as e:
            offgrid.Model(missing)
        self.assertEqual(e.exception.status_name, "file error")
        self.assertIn("missing.gguf", str(e.exception))
        with self.assertRaises(offgrid.OffgridError) as e:
            offgrid.Sampler(top_p=2.0)
        self.assertIn("top_p", str(e.exception))
        ctx = offgrid.Context(self.model, n_ctx=256)
        with self.assertRaises(offgrid.OffgridError) as e:
            ctx.decode([self.model.n_vocab])
        self.assertEqual(e.exception.status_name, "invalid batch")
        self.assertEqual(ctx.seq_pos_max(0), -1)
        self.assertEqual(ctx.tokens, [])
        with self.assertRaises(offgrid.OffgridError):
            ctx.embed("needs an embeddings context")


if __name__ == "__main__":
    unittest.main()
