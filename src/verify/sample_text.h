// Real English text for driving models with realistic token sequences: the opening of Charles
// Dickens' "A Tale of Two Cities" (1859, public domain).
#pragma once

namespace epq {

const char * sample_text();

}  // namespace epq
