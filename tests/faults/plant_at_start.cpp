// epq-faults is the epq command with this file added: the faults named in the environment are
// planted before main runs (see planted_faults.h). The release `epq` has no such file.
#include "faults/planted_faults.h"

namespace {
const bool planted = (epq::faults::plant_from_env(), true);
}
