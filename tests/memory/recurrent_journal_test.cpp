// The recurrent cache's undo journal saves each part (a layer's rows, the PLE rows) of a written slot on its
// first access in a call: whatever the model touched, in any order, undo restores every plane exactly, and parts
// it never touched are neither copied nor changed.
#include <gtest/gtest.h>

#include <vector>

#include "memory/recurrent_cache.h"

namespace offgrid::memory {
namespace {

CacheShape shape() {
    CacheShape s;
    s.n_recr_layers = 3;
    s.conv_floats = 6;
    s.ssm_floats = 10;
    s.row_floats = 5;
    return s;
}

std::vector<float> all_rows(const RecurrentCache & c) {
    std::vector<float> out;
    for (uint32_t slot = 0; slot < c.n_slots(); ++slot) c.read_slot(slot, 1 + c.n_rs_seq(), out);
    return out;
}

void fill(RecurrentCache & c, uint32_t layer, uint32_t row, float v) {
    for (int i = 0; i < 6; ++i) c.conv(layer, row)[i] = v + i;
    for (int i = 0; i < 10; ++i) c.ssm(layer, row)[i] = -v - i;
}

SeqSet only(SeqId s) {
    SeqSet set;
    set.set(s);
    return set;
}

TEST(RecurrentJournal, UndoRestoresWhatTheModelTouchedInAnyOrder) {
    RecurrentCache c(shape(), 3, 1);
    // A first call gives sequences 0 and 1 their state (including a snapshot plane).
    c.journal_begin();
    for (SeqId s : {0, 1}) {
        c.prepare_group(s, only(s));
        for (uint32_t l = 0; l < 3; ++l) {
            fill(c, l, c.row(0, s), 10.0f * (s + 1) + l);
            fill(c, l, c.row(1, s), 100.0f * (s + 1) + l);
        }
        for (int i = 0; i < 5; ++i) c.row_state(c.row(0, s))[i] = 7.0f + s + i;
        c.finish_group(s, only(s), 4, 5);
    }
    c.journal_commit();
    const std::vector<float> before = all_rows(c);

    // A call that fails: layer 2 then layer 0 (layer 1 never), the snapshot plane, PLE; then a new sequence 2.
    c.journal_begin();
    c.prepare_group(0, only(0));
    fill(c, 2, c.row(0, 0), -1.0f);
    fill(c, 0, c.row(1, 0), -2.0f);
    c.row_state(c.row(0, 0))[3] = 99.0f;
    c.finish_group(0, only(0), 5, 1);
    c.prepare_group(2, only(2));  // new: zeroed rows, saved at once
    fill(c, 1, c.row(0, 2), -3.0f);
    c.finish_group(2, only(2), 0, 1);
    EXPECT_NE(all_rows(c), before);
    c.journal_undo();
    EXPECT_EQ(all_rows(c), before);
    EXPECT_EQ(c.pos(0), 4);
    EXPECT_FALSE(c.present(2));

    // The same writes committed stay, and the next call's journal starts empty.
    c.journal_begin();
    c.prepare_group(1, only(1));
    fill(c, 1, c.row(0, 1), 5.0f);
    c.finish_group(1, only(1), 5, 1);
    c.journal_commit();
    const std::vector<float> committed = all_rows(c);
    EXPECT_NE(committed, before);
    c.journal_begin();
    c.prepare_group(1, only(1));
    fill(c, 1, c.row(0, 1), 6.0f);
    c.journal_undo();
    EXPECT_EQ(all_rows(c), committed);
}

TEST(RecurrentJournal, CopyOnWriteInsideACallIsUndone) {
    RecurrentCache c(shape(), 2, 0);
    c.journal_begin();
    c.prepare_group(0, only(0));
    for (uint32_t l = 0; l < 3; ++l) fill(c, l, c.row(0, 0), 1.0f + l);
    c.finish_group(0, only(0), 2, 3);
    c.journal_commit();
    c.copy(0, 1);  // 1 shares 0's slot
    const std::vector<float> before = all_rows(c);
    c.journal_begin();
    c.prepare_group(1, only(1));  // materialises 1's own copy, then the model writes it
    fill(c, 0, c.row(0, 1), -9.0f);
    c.journal_undo();
    EXPECT_EQ(all_rows(c), before);
    EXPECT_EQ(c.slot_of(1), 0u);
}

}  // namespace
}  // namespace offgrid::memory
