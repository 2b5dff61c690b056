// Pooled keys in pool order (Storage::pool_keys): a per-sequence copy of the pooled parts of the rep rows, so the
// QSA scan streams n_pools keys instead of reading one row part in every kpool rows, in element-major blocks of 16
// pools (PoolKeyTable) so that it reads element e of 16 pools as one vector. Kept in step lazily: every
// event that can change a sequence's pools or a pooled key lowers the valid prefix (relayout, clear, a pool handed
// to the model to (re)pool), and pool_keys copies what is past it. The rows stay the keys' one true home (states
// save the rows; the copy is rebuilt from them).
#include <algorithm>
#include <cstring>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "common/prefetch.h"
#include "memory/hybrid_memory.h"

namespace offgrid::memory {

void HybridMemory::forget_pool_keys(SeqId s, size_t from) {
    if (s < 0 || (uint32_t)s >= params_.n_seq_max) return;
    for (auto & layer : pool_keys_) layer[s].valid = std::min(layer[s].valid, from);
}

void HybridMemory::forget_repooled_keys(uint32_t rep) {
    if (pool_keys_.empty()) return;
    const uint32_t st = rep / kv_.kv_size(), local = rep % kv_.kv_size();
    const CellStream & cs = kv_.stream(st);
    const SeqSet & set = cs.seqs(local);
    for (size_t q = seq_begin(set); q < set.size(); q = seq_next(set, q)) {
        const int64_t k = layout_.pool_of((SeqId)q, layout_.rank((SeqId)q, cs.pos(local), rep));
        forget_pool_keys((SeqId)q, k < 0 ? 0 : (size_t)k);
    }
}

namespace {

// Keys lane0 .. lane0 + nk of a block (src[k]: the key of lane lane0 + k, dim elements) into their lanes of the
// block (PoolKeyTable's layout). Element-major: the block is written in order, the nk keys read side by side.
template <class T>
void fill_lanes(const uint8_t * const * src, size_t nk, size_t lane0, size_t dim, uint8_t * block) {
    T * dst = reinterpret_cast<T *>(block) + lane0;
    for (size_t e = 0; e < dim; ++e)
        for (size_t k = 0; k < nk; ++k) dst[e * kPoolKeyBlock + k] = reinterpret_cast<const T *>(src[k])[e];
}

#if defined(__SSE2__)
// A whole block of 16-bit keys (dim a multiple of 8) by 8 x 8 transposes in SSE2 registers (baseline on x86-64):
// a restore copies a 64k sequence's keys this way, 16384 per layer. The same bytes as fill_lanes.
void fill_block16(const uint8_t * const * src, size_t dim, uint8_t * block) {
    for (size_t e0 = 0; e0 < dim; e0 += 8) {
        for (size_t half = 0; half < 2; ++half) {
            __m128i a[8];
            for (int k = 0; k < 8; ++k)
                a[k] = _mm_loadu_si128(reinterpret_cast<const __m128i *>(src[8 * half + k] + e0 * 2));
            __m128i b[8], c[8];
            for (int k = 0; k < 4; ++k) {  // b[2k], b[2k+1]: keys 2k, 2k+1 interleaved (elements 0-3, 4-7)
                b[2 * k] = _mm_unpacklo_epi16(a[2 * k], a[2 * k + 1]);
                b[2 * k + 1] = _mm_unpackhi_epi16(a[2 * k], a[2 * k + 1]);
            }
            for (int g = 0; g < 2; ++g) {  // c[4g + j]: keys 4g .. 4g+3, elements 2j and 2j+1
                c[4 * g + 0] = _mm_unpacklo_epi32(b[4 * g], b[4 * g + 2]);
                c[4 * g + 1] = _mm_unpackhi_epi32(b[4 * g], b[4 * g + 2]);
                c[4 * g + 2] = _mm_unpacklo_epi32(b[4 * g + 1], b[4 * g + 3]);
                c[4 * g + 3] = _mm_unpackhi_epi32(b[4 * g + 1], b[4 * g + 3]);
            }
            uint8_t * out = block + (e0 * kPoolKeyBlock + 8 * half) * 2;
            for (int j = 0; j < 4; ++j) {  // elements e0 + 2j and e0 + 2j + 1 of the 8 keys
                _mm_storeu_si128(reinterpret_cast<__m128i *>(out + (2 * j) * kPoolKeyBlock * 2), _mm_unpacklo_epi64(c[j], c[4 + j]));
                _mm_storeu_si128(reinterpret_cast<__m128i *>(out + (2 * j + 1) * kPoolKeyBlock * 2), _mm_unpackhi_epi64(c[j], c[4 + j]));
            }
        }
    }
}
#endif

}  // namespace

PoolKeyTable HybridMemory::pool_keys(uint32_t attn_layer, SeqId seq) {
    if (pool_keys_.empty() || attn_layer >= pool_keys_.size() || seq < 0 || (uint32_t)seq >= params_.n_seq_max)
        return {};
    PoolKeys & pk = pool_keys_[attn_layer][seq];
    const std::vector<uint32_t> & reps = layout_.seq(seq).reps;
    const size_t row_bytes = kv_.idx_row_bytes(attn_layer);
    if (row_bytes == 0) return {};  // a layer without indexer rows has no pooled keys
    const size_t part = row_bytes / params_.shape.attn(attn_layer).idx_parts, at = row_bytes - part;
    const size_t elem = params_.shape.type_idx == tensor::ElemType::F32 ? 4 : 2, dim = part / elem;
    const size_t need = (reps.size() + kPoolKeyBlock - 1) / kPoolKeyBlock * kPoolKeyBlock * part;
    // Room for every pool the stream can hold, on first use: appending a decoded token's pool never reallocates
    // (the pages are only touched as keys arrive).
    const size_t most = (kv_.kv_size() / params_.kpool + kPoolKeyBlock - 1) / kPoolKeyBlock * kPoolKeyBlock * part;
    if (pk.keys.capacity() < need) pk.keys.reserve(std::max({need, most, 2 * pk.keys.capacity()}));
    pk.keys.resize(need);
    pk.valid = std::min(pk.valid, reps.size());
    // Block by block (a decode adds one key now and then; a restore or an edit copies a whole sequence): the rep
    // rows are kpool rows apart, so the next block's are requested while this one is filled.
    auto key_of = [&](size_t k) { return static_cast<const uint8_t *>(kv_.idx_row(attn_layer, reps[k])) + at; };
    for (size_t k = pk.valid; k < reps.size();) {
        const size_t b = k / kPoolKeyBlock, lane0 = k % kPoolKeyBlock;
        const size_t nk = std::min(kPoolKeyBlock - lane0, reps.size() - k);
        const uint8_t * src[kPoolKeyBlock];
        for (size_t j = 0; j < nk; ++j) src[j] = key_of(k + j);
        for (size_t j = k + nk; j < std::min(reps.size(), k + nk + kPoolKeyBlock); ++j)
            for (size_t o = 0; o < part; o += 64) prefetch_read(key_of(j) + o);
        uint8_t * block = pk.keys.data() + b * kPoolKeyBlock * part;
        if (elem == 4) {
            fill_lanes<uint32_t>(src, nk, lane0, dim, block);
#if defined(__SSE2__)
        } else if (nk == kPoolKeyBlock && dim % 8 == 0) {
            fill_block16(src, dim, block);
#endif
        } else {
            fill_lanes<uint16_t>(src, nk, lane0, dim, block);
        }
        k += nk;
    }
    pk.valid = reps.size();
    return {pk.keys.data(), dim, elem};
}

}  // namespace offgrid::memory
