#include "verify/sample_text.h"

namespace epq {

const char * sample_text() {
    return "It was the best of times, it was the worst of times, it was the age of wisdom, it was the age of "
           "foolishness, it was the epoch of belief, it was the epoch of incredulity, it was the season of Light, "
           "it was the season of Darkness, it was the spring of hope, it was the winter of despair, we had "
           "everything before us, we had nothing before us, we were all going direct to Heaven, we were all going "
           "direct the other way - in short, the period was so far like the present period, that some of its "
           "noisiest authorities insisted on its being received, for good or for evil, in the superlative degree "
           "of comparison only.\n\nThere were a king with a large jaw and a queen with a plain face, on the throne "
           "of England; there were a king with a large jaw and a queen with a fair face, on the throne of France. "
           "In both countries it was clearer than crystal to the lords of the State preserves of loaves and "
           "fishes, that things in general were settled for ever.\n\nIt was the year of Our Lord one thousand "
           "seven hundred and seventy-five. Spiritual revelations were conceded to England at that favoured "
           "period, as at this.";
}

}  // namespace epq
