// Atomic file writes and whole-file reads are part of the public API (offgrid/files.h); internal code includes
// them here.
#pragma once

#include "offgrid/files.h"

namespace offgrid {

// Removes the temporary file of every AtomicFile still open in this process: for a process about to end without
// unwinding (MPI_Abort, a termination signal), so that it leaves neither a partial target nor a temporary behind.
// Does nothing when another thread is inside an AtomicFile's bookkeeping at that moment.
void remove_temporary_files();

}  // namespace offgrid
