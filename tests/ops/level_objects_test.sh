#!/bin/sh
# The objects compiled for one ISA level (src/ops/cpu/*_avx2, *_avx512, *_amx, *_neondot) define no function that
# the linker merges across objects (a weak definition: an inline function or template instance with external
# linkage emitted out of line). Such a function has one copy per object, each compiled for its object's level, and
# the linker keeps one of them for every caller: an AVX-512 copy of an inline helper could then run on a CPU
# without AVX-512. Helpers shared by level files have internal linkage (kernels_quant_int8_entries.h says how).
# Merged data (weak or unique objects: inline constants) is the same bytes whichever copy is kept, so it may stay.
# usage: level_objects_test.sh NM 'obj1;obj2;...'
nm_tool=$1
objects=$2
found=0
checked=0
old_ifs=$IFS
IFS=';'
for obj in $objects; do
    case $obj in
        *_avx2.cpp.o | *_avx512.cpp.o | *_amx.cpp.o | *_neondot.cpp.o) ;;
        *) continue ;;
    esac
    checked=$((checked + 1))
    IFS=$old_ifs
    # nm kinds: W / w a weak function (V / v and u are weak and unique data).
    merged=$("$nm_tool" -C --defined-only "$obj" | awk '$2 ~ /^[Ww]$/')
    IFS=';'
    if [ -n "$merged" ]; then
        echo "$obj defines functions the linker merges across objects:"
        echo "$merged"
        found=1
    fi
done
IFS=$old_ifs
echo "level objects checked: $checked"
[ "$checked" -gt 0 ] || { echo "no level objects in the list"; exit 1; }
exit $found
