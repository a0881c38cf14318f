#include "engine/weight_layout.h"

namespace epq {

bool layout_repacks(WeightLayout layout, bool arena_holds_everything) {
    switch (layout) {
        case WeightLayout::repacked: return true;
        case WeightLayout::file: return false;
        case WeightLayout::automatic: break;
    }
    return arena_holds_everything;
}

std::string stock_configuration(bool repack) {
    return repack ? "stock llama.cpp with its default flags" : "stock llama.cpp with -nr (--no-repack)";
}

std::string layout_line(WeightLayout asked, bool repack) {
    std::string why;
    switch (asked) {
        case WeightLayout::repacked: why = "--repack"; break;
        case WeightLayout::file: why = "-nr"; break;
        case WeightLayout::automatic:
            why = repack ? "the arena holds every expert, so each is repacked once"
                         : "the arena holds part of the experts: repacking after every read would take CPU from the "
                           "compute threads; --repack for stock's default layout";
            break;
    }
    return std::string(repack ? "weights repacked where ggml repacks them" : "weights in the file's layout") + " (" +
           why + "): output identical to " + stock_configuration(repack);
}

}  // namespace epq
