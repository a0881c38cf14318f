#include "engine/llama_log.h"
#include "engine/llama_session.h"
#include "engine/paged_model.h"
#include "util/error.h"
#include "verify/moe_capture.h"
#include "verify/sample_text.h"
#include "verify/verify.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>
#include <sstream>

namespace epq {

std::vector<int32_t> sample_tokens(const llama_vocab * vocab, size_t n) {
    std::vector<int32_t> out;
    const std::string text = sample_text();
    std::vector<llama_token> buf(text.size() + 16);
    const int32_t k = llama_tokenize(vocab, text.data(), static_cast<int32_t>(text.size()), buf.data(),
                                     static_cast<int32_t>(buf.size()), false, false);
    if (k <= 0) {
        throw Error("cannot tokenize the sample text");
    }
    while (out.size() < n) {
        out.insert(out.end(), buf.begin(), buf.begin() + k);
    }
    out.resize(n);
    return out;
}

namespace {

using Captures = std::map<int, std::map<int, MoeLayerCapture>>;  // batch -> layer -> capture

Captures capture_all(const VerifyOptions & o, const std::vector<int> & sizes,
                     const llama_model_tensor_buft_override * ov) {
    MoeCapture cap;
    SessionOptions so;
    so.n_threads = o.n_threads;
    const int max_n = *std::max_element(sizes.begin(), sizes.end());
    so.n_ctx = static_cast<uint32_t>(std::max(64, max_n + 16));
    so.n_batch = static_cast<uint32_t>(std::max(32, max_n));
    so.overrides = ov;
    so.use_extra_bufts = o.repack;
    so.cb_eval = &MoeCapture::callback;
    so.cb_eval_user_data = &cap;
    LlamaSession s(o.model, so);
    const auto tokens = sample_tokens(s.vocab(), static_cast<size_t>(max_n));
    Captures out;
    for (int n : sizes) {
        s.clear();
        cap.clear();
        s.decode(std::vector<llama_token>(tokens.begin(), tokens.begin() + n));
        out[n] = std::move(cap.layers);
    }
    return out;
}

// Max |a - b|; infinite when the two differ in size or are empty (nothing captured proves nothing).
double max_abs(const std::vector<float> & a, const std::vector<float> & b) {
    if (a.size() != b.size() || a.empty()) {
        return INFINITY;
    }
    double m = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
        const double d = std::fabs(static_cast<double>(a[i]) - static_cast<double>(b[i]));
        if (!(d <= m)) {
            m = std::isnan(d) ? INFINITY : d;
        }
    }
    return m;
}

}  // namespace

CheckReport verify_multitoken(const VerifyOptions & o) {
    set_llama_verbosity(false);
    std::vector<int> sizes = o.batch_sizes;
    if (o.fast) {
        sizes = {1, 2, 8, 32};
    }
    // Stock first: the pager's device is not registered yet, so these are plain llama.cpp runs.
    const Captures stock = capture_all(o, sizes, nullptr);
    const GgufFile file = GgufFile::open(o.model);
    const ExpertIndex idx = ExpertIndex::build(file);
    PagedModelOptions po;
    po.arena = std::to_string(idx.expert_bytes + idx.expert_bytes / 8 + (64ull << 20));  // every expert resident
    po.n_ctx = 1024;
    po.layout = o.repack ? WeightLayout::repacked : WeightLayout::file;
    PagedModel paged(o.model, po);
    const Captures epq = capture_all(o, sizes, paged.overrides());
    paged.loaded();

    CheckReport r;
    r.check = "multitoken";
    std::ostringstream md;
    md << "# Multi-Token llama.cpp Equivalence\n\n";
    bool all_ok = true;
    double agg_w = 0.0, agg_o = 0.0;
    int cases = 0;
    std::ostringstream rows;
    nlohmann::json jcases = nlohmann::json::array();
    for (int n : sizes) {
        const auto & sl = stock.at(n);
        const auto & el = epq.at(n);
        if (sl.empty()) {
            all_ok = false;  // no MoE layer captured at all: the graph names did not match
            rows << "| n" << n << " | " << n << " | - | false | inf | inf |\n";
            jcases.push_back({{"batch", n}, {"error", "no MoE layer captured"}});
        }
        for (const auto & [layer, s] : sl) {
            static const MoeLayerCapture kMissing;
            const auto found = el.find(layer);
            const MoeLayerCapture & e = found == el.end() ? kMissing : found->second;
            const bool ids_exact = s.ids == e.ids && !s.ids.empty();
            const double w = max_abs(s.weights, e.weights), out = max_abs(s.output, e.output);
            all_ok = all_ok && ids_exact && w == 0.0 && out == 0.0;
            agg_w = std::max(agg_w, w);
            agg_o = std::max(agg_o, out);
            ++cases;
            rows << "| n" << n << " | " << n << " | " << layer << " | " << (ids_exact ? "true" : "false") << " | "
                 << fmt_float(w) << " | " << fmt_float(out) << " |\n";
            jcases.push_back({{"batch", n},
                              {"layer", layer},
                              {"ids_exact", ids_exact},
                              {"weight_max_abs", w},
                              {"output_max_abs", out}});
        }
        all_ok = all_ok && el.size() == sl.size();  // a layer epq ran that stock did not
    }
    r.status = all_ok && cases > 0 ? Status::Pass : Status::Fail;
    md << "**Verdict:** " << status_label(r.status) << "  \n**Implementation:** `epq pager` (all experts resident) vs "
       << "stock llama.cpp, same file, " << o.n_threads << " threads, "
       << (o.repack ? "weights repacked where ggml repacks them (stock's default)" : "no weight repacking (-nr)")
       << "  \n**Model:** `" << o.model << "`  \n**Cases:** " << cases << "\n\n";
    md << "| Batch | Tokens | Layer | Expert IDs exact | Weight max abs | Output max abs "
          "|\n|---|---:|---:|---:|---:|---:|\n"
       << rows.str() << "\n";
    md << "Aggregate weight max abs: " << fmt_float(agg_w) << " (limit 0.0).  \n";
    md << "Aggregate output max abs: " << fmt_float(agg_o) << " (limit 0.0).  \n\n";
    md << "**Limits:** expert ids exact and routing weights and layer outputs bit-identical (max abs 0.0): epq runs "
          "llama.cpp's own MUL_MAT_ID kernel on the same bytes. A missing or empty capture (ids, weights or "
          "outputs) is a failure, shown as inf.\n";
    r.markdown = md.str();
    r.summary = status_label(r.status) + ": " + std::to_string(cases) +
                " layer x batch cases, aggregate weight max abs " + fmt_float(agg_w) + ", output max abs " +
                fmt_float(agg_o);
    r.json = {{"cases", jcases},
              {"aggregate_weight_max_abs", agg_w},
              {"aggregate_output_max_abs", agg_o},
              {"batch_sizes", sizes},
              {"model", o.model}};
    return r;
}

}  // namespace epq
