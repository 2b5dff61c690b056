"""qwen4exp in PyTorch: a trainable model and an independent reference of the engine's forward.

Parameters are held under their GGUF tensor names in GGUF maths (norm gammas are plain multipliers, already
"1+w"), so a GGUF file loads without conversion and an export is a plain dump. One exception while training:
`ssm_a` is held as its logarithm `ssm_alog` (ssm_a = -exp(ssm_alog)), so the decay stays negative.

Forward for whole sequences that start at position 0 (one sequence per batch row; cell = position):
  * Gated DeltaNet: chunked (WY form, exact up to rounding) or recurrent (the spec's token loop), section 3.7;
  * full attention with the engine's k-pool QSA (spec 5.5): pools of r consecutive tokens, pooled raw indexer
    keys normed and roped at the pool's first position; a token with more complete pools than top_k/r keeps
    the best top_k/r (ties to the earlier pool) plus its incomplete tail, otherwise it attends densely;
  * hyper-connections, PLE n-gram embeddings (host hashing in numpy), softmax top-k MoE with a shared expert;
  * the NextN (MTP) block of qwen4exp-mtp.md 3.2-3.4 (grouped hnorm, dense attention), which predicts t+2.
"""
import math

import numpy as np
import torch
import torch.nn.functional as F

ARCH = "qwen4exp"


class Hparams:
    """The hyper-parameters of a GGUF metadata dict (the keys the engine reads)."""

    def __init__(self, meta, n_vocab):
        a = lambda k, d=None: meta.get(ARCH + "." + k, d)
        self.n_vocab = n_vocab
        self.E = a("embedding_length")
        n_all = a("block_count")
        self.n_nextn = a("nextn_predict_layers", 0)
        self.n_layer = n_all - self.n_nextn
        self.H = a("attention.head_count")
        self.Hkv = a("attention.head_count_kv", self.H)
        self.D = a("attention.key_length", self.E // self.H)
        self.n_rot = a("rope.dimension_count", self.D)
        self.rope_base = float(a("rope.freq_base", 10000.0))
        sec = a("rope.dimension_sections")
        self.sections = list(sec) if isinstance(sec, list) else [sec] * 4
        self.eps = float(a("attention.layer_norm_rms_epsilon"))
        self.d_conv = a("ssm.conv_kernel")
        self.d_state = a("ssm.state_size")
        self.Hv = a("ssm.time_step_rank")
        self.Hk = a("ssm.group_count")
        self.hc = a("hyper_connection.count")
        self.hc_lr = a("hyper_connection.low_rank")
        self.Hi = a("attention.indexer.head_count")
        self.Di = a("attention.indexer.key_length")
        self.top_k = a("attention.indexer.top_k")
        cr = a("attention.compress_ratios", 0)
        self.ratios = list(cr) if isinstance(cr, list) else [cr] * n_all
        rl = a("attention.recurrent_layers")
        if rl is not None:
            self.is_recr = [bool(x) for x in rl]
        else:
            iv = a("full_attention_interval", 4)
            self.is_recr = [(i < self.n_layer) and ((i + 1) % iv != 0) for i in range(n_all)]
        self.n_expert = a("expert_count")
        eu = a("expert_used_count")
        self.n_used = eu[0] if isinstance(eu, list) else eu
        ple = a("ple.layers")
        self.ple_layer = ple[0] if ple else None
        if ple:
            self.ple_n = a("ple.ngram_size")
            self.ple_g = a("ple.heads_per_ngram")
            self.ple_kp = a("ple.conv_kernel")
            self.ple_eos = a("ple.eos_token_id")
            self.ple_dim = a("embedding_length_per_layer_input")
            self.ple_mult = [int(x) for x in a("ple.layer_multipliers")]
            self.ple_off = [int(x) for x in a("ple.head_offsets")]
            self.ple_vocab = [int(x) for x in a("ple.head_vocab_sizes")]


def rms(x, g=None, eps=1e-6):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return y if g is None else y * g


class Rope:
    """IMRoPE (spec 3.0) for text positions: a token at p is rotated with (p, p, p, 0), a pooled key with
    (p0, p0, p0, p0); pairs whose section falls to the fourth component therefore differ between the two."""

    def __init__(self, hp):
        R, s = hp.n_rot, hp.sections
        S = sum(s)
        self.R = R
        use_pt = []
        for i in range(R // 2):
            sec = i % S
            if sec % 3 == 1 and sec < 3 * s[1]:
                use_pt.append(True)
            elif sec % 3 == 2 and sec < 3 * s[2]:
                use_pt.append(True)
            elif sec % 3 == 0 and sec < 3 * s[0]:
                use_pt.append(True)
            else:
                use_pt.append(False)
        self.use_pt = torch.tensor(use_pt)
        self.inv = torch.tensor([hp.rope_base ** (-2.0 * i / R) for i in range(R // 2)], dtype=torch.float64)

    def __call__(self, x, pos, pooled=False):
        """x [..., T, n, Dh] rotated at positions pos [T] (float64 angles, cast to x's type)."""
        ang = pos.to(torch.float64)[:, None] * self.inv[None, :]
        if not pooled:
            ang = torch.where(self.use_pt[None, :], ang, torch.zeros_like(ang))
        c = torch.cos(ang).to(x.dtype)[:, None, :]
        s = torch.sin(ang).to(x.dtype)[:, None, :]
        h = self.R // 2
        x1, x2, rest = x[..., :h], x[..., h:self.R], x[..., self.R:]
        return torch.cat([x1 * c - x2 * s, x1 * s + x2 * c, rest], dim=-1)


def ple_rows(tokens, hp):
    """PLE table rows [B, T, Hp] (spec 3.4.1) for sequences starting at position 0."""
    tok = np.asarray(tokens, dtype=np.int64)
    B, T = tok.shape
    N, G, eos = hp.ple_n, hp.ple_g, hp.ple_eos
    ctx = np.empty((N, B, T), dtype=np.uint64)
    ctx[0] = tok.astype(np.uint64)
    cut = np.zeros((B, T), dtype=bool)
    for s in range(1, N):
        prev = np.full((B, T), -1, dtype=np.int64)
        prev[:, s:] = tok[:, :T - s]
        cut = cut | (prev < 0) | (prev == eos)
        ctx[s] = np.where(cut, np.uint64(eos), prev.astype(np.uint64))
    rows = np.empty((B, T, (N - 1) * G), dtype=np.int64)
    with np.errstate(over="ignore"):
        for n in range(2, N + 1):
            mixed = np.zeros((B, T), dtype=np.uint64)
            for j in range(n):
                mixed ^= ctx[j] * np.uint64(hp.ple_mult[j])
            for g in range(G):
                h = (n - 2) * G + g
                rows[:, :, h] = (mixed % np.uint64(hp.ple_vocab[h])).astype(np.int64) + hp.ple_off[h]
    return torch.from_numpy(rows)


def gdn_recurrent(q, k, v, g, beta):
    """Token loop of the delta rule. q, k [B, T, Hv, dk] (already paired to value heads), v [B, T, Hv, dv],
    g (log decay) and beta [B, T, Hv]. Returns o [B, T, Hv, dv] including the 1/sqrt(dk) factor."""
    B, T, Hv, dk = k.shape
    dv = v.shape[-1]
    S = torch.zeros(B, Hv, dk, dv, dtype=q.dtype)
    outs = []
    for t in range(T):
        S = S * torch.exp(g[:, t])[:, :, None, None]
        kt = k[:, t]
        pred = torch.einsum("bhim,bhi->bhm", S, kt)
        delta = beta[:, t][:, :, None] * (v[:, t] - pred)
        S = S + kt[:, :, :, None] * delta[:, :, None, :]
        outs.append(torch.einsum("bhim,bhi->bhm", S, q[:, t]) / math.sqrt(dk))
    return torch.stack(outs, dim=1)


def gdn_chunked(q, k, v, g, beta, chunk=64):
    """The same recurrence in chunks (WY representation of the products of Householder-like updates)."""
    B, T, Hv, dk = k.shape
    dv = v.shape[-1]
    pad = (-T) % chunk
    tr = lambda x: x.transpose(1, 2)  # [B, H, T, ...]
    q, k, v, g, beta = tr(q), tr(k), tr(v), g.transpose(1, 2), beta.transpose(1, 2)
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = F.pad(g, (0, pad)), F.pad(beta, (0, pad))
    n = (T + pad) // chunk
    q = q.reshape(B, Hv, n, chunk, dk) / math.sqrt(dk)
    k = k.reshape(B, Hv, n, chunk, dk)
    v = v.reshape(B, Hv, n, chunk, dv)
    beta = beta.reshape(B, Hv, n, chunk)
    gc = g.reshape(B, Hv, n, chunk).cumsum(-1)
    kb = k * beta[..., None]
    vb = v * beta[..., None]
    ones = torch.ones(chunk, chunk, dtype=torch.bool)
    strict = torch.tril(ones, -1)
    diff = gc[..., :, None] - gc[..., None, :]
    decay = torch.exp(torch.where(torch.tril(ones), diff, torch.full_like(diff, -1e30)))
    L = (kb @ k.transpose(-1, -2)) * decay * strict
    eye = torch.eye(chunk, dtype=q.dtype)
    Ainv = torch.linalg.solve_triangular(eye + L, eye.expand_as(L), upper=False, unitriangular=True)
    u = Ainv @ vb                                    # values net of in-chunk corrections
    w = Ainv @ (kb * torch.exp(gc)[..., None])       # what the incoming state subtracts
    S = torch.zeros(B, Hv, dk, dv, dtype=q.dtype)
    outs = []
    causal = torch.tril(ones)
    for i in range(n):
        qi, ki, gi = q[:, :, i], k[:, :, i], gc[:, :, i]
        vnew = u[:, :, i] - w[:, :, i] @ S
        att = (qi @ ki.transpose(-1, -2)) * decay[:, :, i] * causal
        outs.append((qi * torch.exp(gi)[..., None]) @ S + att @ vnew)
        glast = gi[..., -1]
        S = S * torch.exp(glast)[..., None, None] + \
            (ki * torch.exp(glast[..., None] - gi)[..., None]).transpose(-1, -2) @ vnew
    o = torch.stack(outs, dim=2).reshape(B, Hv, n * chunk, dv)[:, :, :T]
    return o.transpose(1, 2)


class Qwen4Exp(torch.nn.Module):
    def __init__(self, meta, tensors, n_vocab, gdn="chunked"):
        """tensors: name -> array/tensor in reversed ggml shape (a torch Linear weight for matrices)."""
        super().__init__()
        self.meta = meta
        self.hp = Hparams(meta, n_vocab)
        self.rope = Rope(self.hp)
        self.gdn_mode = gdn
        self.p = torch.nn.ParameterDict()
        for name, arr in tensors.items():
            t = arr if isinstance(arr, torch.Tensor) else torch.from_numpy(np.ascontiguousarray(arr))
            self.p[self.key(name)] = torch.nn.Parameter(t.to(torch.float32))
        self.indexer_kl = []   # per QSA layer, filled when forward(..., indexer_loss=True)

    @staticmethod
    def key(name):
        return name.replace(".", "~")

    def has(self, name):
        return self.key(name) in self.p

    def w(self, name):
        return self.p[self.key(name)]

    def sc(self, name):
        """A projection's `.scale` sidecar (spec 2.7), 1 when absent."""
        return self.w(name) if self.has(name) else None

    def lin(self, x, name):
        y = x @ self.w(name + ".weight").t()
        s = self.sc(name + ".scale")
        return y if s is None else y * s

    def tensors(self):
        """GGUF name -> float32 numpy array, with ssm_alog turned into ssm_a."""
        out = {}
        for k, v in self.p.items():
            name = k.replace("~", ".")
            a = v.detach().float().cpu().numpy()
            if name.endswith(".ssm_alog"):
                out[name[:-len("alog")] + "a"] = -np.exp(a)
            else:
                out[name] = a
        return out

    # --- building blocks -------------------------------------------------------------------------------------
    def hc_mix(self, X, prefix, inject=True):
        hp = self.hp
        gamma = self.w(prefix + "_norm.weight").reshape(hp.hc, hp.E)
        Xn = rms(X, gamma, hp.eps)                                # [..., hc, E]
        xn = Xn.flatten(-2)
        lo = F.silu((xn @ self.w(prefix + "_down.weight").t()) / hp.hc)
        g = (lo @ self.w(prefix + "_up.weight").t()).unflatten(-1, (hp.hc, hp.E))
        mixed = (Xn * torch.sigmoid(g)).sum(-2) / hp.hc
        inj = xn @ self.w(prefix + "_inject.weight").t() if inject else None
        return mixed, inj

    def hc_combine(self, X, y, inj):
        return X + (2.0 * torch.sigmoid(inj / self.hp.hc))[..., None] * y[..., None, :]

    def moe(self, f, p):
        hp = self.hp
        logits = f @ self.w(p + "ffn_gate_inp.weight").t()
        probs = torch.softmax(logits, dim=-1)
        top_p, top_i = torch.topk(probs, hp.n_used, dim=-1)
        wsel = top_p / top_p.sum(-1, keepdim=True).clamp_min(6.103515625e-5)
        flat = f.reshape(-1, hp.E)
        ti, wf = top_i.reshape(-1, hp.n_used), wsel.reshape(-1, hp.n_used)
        out = torch.zeros_like(flat)
        fused = self.has(p + "ffn_gate_up_exps.weight")
        down = self.w(p + "ffn_down_exps.weight")
        dsc = self.sc(p + "ffn_down_exps.scale")
        for e in range(hp.n_expert):
            rows, slot = (ti == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            x = flat[rows]
            if fused:
                gu = x @ self.w(p + "ffn_gate_up_exps.weight")[e].t()
                gate, up = gu.chunk(2, dim=-1)
            else:
                gate = x @ self.w(p + "ffn_gate_exps.weight")[e].t()
                up = x @ self.w(p + "ffn_up_exps.weight")[e].t()
                gs, us = self.sc(p + "ffn_gate_exps.scale"), self.sc(p + "ffn_up_exps.scale")
                if gs is not None:
                    gate = gate * gs[e]
                if us is not None:
                    up = up * us[e]
            y = (F.silu(gate) * up) @ down[e].t()
            if dsc is not None:
                y = y * dsc[e]
            out = out.index_add(0, rows, y * wf[rows, slot][:, None])
        out = out.reshape(f.shape)
        sg = self.lin(f, p + "ffn_gate_shexp")
        su = self.lin(f, p + "ffn_up_shexp")
        sh = self.lin(F.silu(sg) * su, p + "ffn_down_shexp")
        sh = sh * torch.sigmoid(f @ self.w(p + "ffn_gate_inp_shexp.weight"))[..., None]
        # Switch-style balance term: fraction routed times mean probability, per expert.
        frac = torch.zeros(hp.n_expert, dtype=f.dtype).index_add(0, ti.reshape(-1), torch.ones(ti.numel(), dtype=f.dtype))
        frac = frac / ti.numel()
        self.balance.append(hp.n_expert * (frac.detach() * probs.reshape(-1, hp.n_expert).mean(0)).sum())
        return out + sh

    def attention(self, a, p, pos, qsa_ratio, indexer_loss=False, dense=False):
        hp = self.hp
        B, T, _ = a.shape
        H, Hkv, D = hp.H, hp.Hkv, hp.D
        Qf = self.lin(a, p + "attn_q").view(B, T, H, 2 * D)
        q, gate = Qf[..., :D], Qf[..., D:]
        q = rms(q, self.w(p + "attn_q_norm.weight"), hp.eps)
        k = rms(self.lin(a, p + "attn_k").view(B, T, Hkv, D), self.w(p + "attn_k_norm.weight"), hp.eps)
        v = self.lin(a, p + "attn_v").view(B, T, Hkv, D)
        q, k = self.rope(q, pos), self.rope(k, pos)
        grp = H // Hkv
        k = k.repeat_interleave(grp, dim=2)
        v = v.repeat_interleave(grp, dim=2)
        s = torch.einsum("bthd,bshd->bhts", q, k) / math.sqrt(D)
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        allowed = causal
        if qsa_ratio > 0 and not dense:
            allowed, idx_scores, n_pools = self.qsa_select(a, p, pos, qsa_ratio)
            if indexer_loss and idx_scores is not None:
                with torch.no_grad():
                    probs = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1).sum(1)  # [B, T, T]
                self.indexer_kl.append(self.indexer_kl_loss(probs, idx_scores, n_pools, qsa_ratio))
            allowed = allowed[:, None]
        probs = torch.softmax(s.masked_fill(~allowed, float("-inf")), dim=-1)
        o = torch.einsum("bhts,bshd->bthd", probs, v)
        o = o * torch.sigmoid(gate)
        return self.lin(o.reshape(B, T, H * D), p + "attn_output")

    def indexer_scores(self, a, p, pos, r):
        """Scores [B, T, P] of every complete pool for every token (before visibility), indexer input `a`."""
        hp = self.hp
        B, T, _ = a.shape
        P = T // r
        a = a.detach()  # the indexer learns from its own loss only; selection has no gradient
        kr = a @ self.w(p + "indexer.k_proj.weight").t()                      # raw keys [B, T, Di]
        pooled = kr[:, :P * r].reshape(B, P, r, hp.Di).sum(2) * (1.0 / r)
        pk = rms(pooled, self.w(p + "indexer.k_norm.weight"), hp.eps)
        pk = self.rope(pk[:, :, None, :], torch.arange(P) * r, pooled=True)[:, :, 0]
        qi = (a @ self.w(p + "indexer.q_proj.weight").t()).view(B, T, hp.Hi, hp.Di)
        qi = self.rope(rms(qi, self.w(p + "indexer.q_norm.weight"), hp.eps), pos)
        return torch.relu(torch.einsum("bthd,bpd->bthp", qi, pk)).sum(2) / math.sqrt(hp.Di)

    def qsa_select(self, a, p, pos, r):
        hp = self.hp
        B, T, _ = a.shape
        budget = hp.top_k // r
        P = T // r
        t = torch.arange(T)
        n_pools = torch.div(t + 1, r, rounding_mode="floor")                   # complete pools visible to t
        causal = torch.tril(torch.ones(T, T, dtype=torch.bool))
        if P <= budget:
            return causal[None].expand(B, T, T), None, n_pools
        sc = self.indexer_scores(a, p, pos, r)
        visible = torch.arange(P)[None, :] < n_pools[:, None]                   # [T, P]
        masked = sc.detach().masked_fill(~visible[None], float("-inf"))
        order = torch.sort(masked, dim=-1, descending=True, stable=True).indices[..., :budget]
        chosen = torch.zeros(B, T, P, dtype=torch.bool).scatter_(-1, order, True) & visible[None]
        sparse = n_pools > budget                                               # tokens that select
        chosen = torch.where(sparse[None, :, None], chosen, visible[None].expand(B, T, P))
        cells = torch.zeros(B, T, T, dtype=torch.bool)
        cells[:, :, :P * r] = chosen.repeat_interleave(r, dim=-1)
        tail = (t[None, :] >= (n_pools * r)[:, None]) & causal
        return cells | tail[None], sc, n_pools

    @staticmethod
    def indexer_kl_loss(probs, sc, n_pools, r):
        """KL(attention mass per visible pool || softmax of the indexer's pool scores), averaged over tokens that
        see at least two pools. probs [B, T, T] are the main attention's (detached) probabilities summed over
        heads; sc [B, T, P] the indexer scores, whose gradient reaches only the indexer (its input is detached)."""
        B, T, P = sc.shape
        mass = probs[:, :, :P * r].reshape(B, T, P, r).sum(-1)
        visible = (torch.arange(P)[None, :] < n_pools[:, None])[None]
        mass = mass.masked_fill(~visible, 0.0)
        tgt = mass / mass.sum(-1, keepdim=True).clamp_min(1e-9)
        logq = torch.log_softmax(sc.masked_fill(~visible, float("-inf")), dim=-1)
        term = torch.where(visible, tgt * (torch.log(tgt.clamp_min(1e-9)) - logq), torch.zeros_like(tgt))
        rows = (n_pools >= 2)[None].expand(B, T)
        return term.sum(-1)[rows].mean()

    def gdn(self, a, p):
        hp = self.hp
        B, T, _ = a.shape
        dk = hp.d_state
        x = self.lin(a, p + "attn_qkv")
        z = self.lin(a, p + "attn_gate")
        beta = torch.sigmoid(self.lin(a, p + "ssm_beta"))
        ssm_a = self.w(p + "ssm_a") if self.has(p + "ssm_a") else -torch.exp(self.w(p + "ssm_alog"))
        g = F.softplus(self.lin(a, p + "ssm_alpha") + self.w(p + "ssm_dt.bias"), beta=1.0, threshold=20.0) * ssm_a
        wconv = self.w(p + "ssm_conv1d.weight")                                # [conv_dim, d_conv]
        c = F.conv1d(F.pad(x.transpose(1, 2), (hp.d_conv - 1, 0)), wconv[:, None, :], groups=wconv.shape[0])
        c = F.silu(c).transpose(1, 2)
        kd = hp.Hk * dk
        q = c[..., :kd].reshape(B, T, hp.Hk, dk)
        k = c[..., kd:2 * kd].reshape(B, T, hp.Hk, dk)
        v = c[..., 2 * kd:].reshape(B, T, hp.Hv, dk)
        q = q / torch.sqrt(q.pow(2).sum(-1, keepdim=True) + hp.eps)
        k = k / torch.sqrt(k.pow(2).sum(-1, keepdim=True) + hp.eps)
        pair = torch.arange(hp.Hv) % hp.Hk                                     # tiled V heads
        q, k = q[:, :, pair], k[:, :, pair]
        run = gdn_chunked if self.gdn_mode == "chunked" else gdn_recurrent
        o = run(q, k, v, g, beta)
        y = rms(o, self.w(p + "ssm_norm.weight"), hp.eps) * torch.sigmoid(z.view(B, T, hp.Hv, dk))
        return self.lin(y.reshape(B, T, hp.Hv * dk), p + "ssm_out")

    def ple_block(self, X, u, p):
        hp = self.hp
        B, T = X.shape[:2]
        K = (u @ self.w(p + "ple_key.weight").t()).view(B, T, hp.hc, hp.E)
        Kn = rms(K, self.w(p + "ple_norm_key.weight").reshape(hp.hc, hp.E), hp.eps)
        Qn = rms(X, self.w(p + "ple_norm_query.weight").reshape(hp.hc, hp.E), hp.eps)
        s = (Kn * Qn).sum(-1) / math.sqrt(hp.E)
        gate = torch.sigmoid(torch.sign(s) * torch.sqrt(s.abs().clamp_min(1e-6)))
        v = u @ self.w(p + "ple_value.weight").t()
        Gv = v[:, :, None, :] * gate[..., None]
        Nc = rms(Gv, self.w(p + "ple_norm_conv.weight").reshape(hp.hc, hp.E), hp.eps).reshape(B, T, hp.hc * hp.E)
        wconv = self.w(p + "ple_conv1d.weight")                                # [hc*E, Kp]
        Kp, N = hp.ple_kp, hp.ple_n
        xin = F.pad(Nc.transpose(1, 2), ((Kp - 1) * N, 0))
        conv = F.conv1d(xin, wconv[:, None, :], groups=wconv.shape[0], dilation=N)
        C = F.silu(conv).transpose(1, 2).reshape(B, T, hp.hc, hp.E)
        return X + Gv + C

    # --- model -----------------------------------------------------------------------------------------------
    def trunk(self, tokens, indexer_loss=False, dense=False, detach_indexer_input=True):
        """Final wide residual [B, T, hc, E] of the trunk for token ids [B, T] (positions 0..T-1)."""
        hp = self.hp
        self.balance, self.indexer_kl = [], []
        B, T = tokens.shape
        pos = torch.arange(T)
        e = self.w("token_embd.weight")[tokens]
        X = e[:, :, None, :].expand(B, T, hp.hc, hp.E)
        u = None
        if hp.ple_layer is not None:
            rows = ple_rows(tokens.cpu().numpy(), hp)
            u = self.w("per_layer_token_embd.weight")[rows].reshape(B, T, -1)
        for il in range(hp.n_layer):
            p = f"blk.{il}."
            if il == hp.ple_layer:
                X = self.ple_block(X, u, p)
            a, inj = self.hc_mix(X, p + "hc_attn")
            if hp.is_recr[il]:
                y = self.gdn(a, p)
            else:
                y = self.attention(a, p, pos, hp.ratios[il], indexer_loss, dense)
            X = self.hc_combine(X, y, inj)
            f, inj = self.hc_mix(X, p + "hc_ffn")
            X = self.hc_combine(X, self.moe(f, p), inj)
        return X

    def head(self, X, mixer="output_hc"):
        z, _ = self.hc_mix(X, mixer, inject=False)
        out = self.w("output.weight") if self.has("output.weight") else self.w("token_embd.weight")
        return z @ out.t()

    def forward(self, tokens, indexer_loss=False, dense=False):
        X = self.trunk(tokens, indexer_loss, dense)
        return self.head(X), X

    def mtp(self, X, next_tokens):
        """NextN rows: row t takes the trunk residual at t and token t+1 (next_tokens[:, t]) and predicts t+2.
        Positions are those of the token (t+1), and attention is dense over the rows."""
        hp = self.hp
        p = f"blk.{hp.n_layer}."
        B, T = next_tokens.shape
        e = self.w("token_embd.weight")[next_tokens]
        eh = rms(e, self.w(p + "nextn.enorm.weight"), hp.eps)
        hh = rms(X, self.w(p + "nextn.hnorm.weight").reshape(hp.hc, hp.E), hp.eps)
        W = self.w(p + "nextn.eh_proj.weight")                                 # [E, 2E]
        R = (eh @ W[:, :hp.E].t())[:, :, None, :] + hh @ W[:, hp.E:].t()
        s = self.sc(p + "nextn.eh_proj.scale")
        if s is not None:
            R = R * s
        a, inj = self.hc_mix(R, p + "hc_attn")
        R = self.hc_combine(R, self.attention(a, p, torch.arange(1, T + 1), 0), inj)
        f, inj = self.hc_mix(R, p + "hc_ffn")
        R = self.hc_combine(R, self.moe(f, p), inj)
        return self.head(R, p + "nextn.hc_head")
