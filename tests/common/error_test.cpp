#include <gtest/gtest.h>

#include "common/error.h"

TEST(FileError, NamesFileOffsetAndField) {
    offgrid::FileError e("m.gguf", 24, "tensor_count", "larger than the file");
    EXPECT_STREQ(e.what(), "m.gguf: at byte 24: tensor_count: larger than the file");
    EXPECT_EQ(e.offset(), 24u);
    EXPECT_EQ(e.field(), "tensor_count");
}
