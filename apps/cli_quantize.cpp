// `moe-server quantize`: any model (folder, GGUF file or synth:PRESET) as one
// GGUF file in a quantization mix (engine/model/gguf_model.h), with its
// tokenizer and chat template, so the file serves alone and other GGUF
// readers load it. A progress bar on stderr; the file is written atomically.
#include <chrono>
#include <cstdio>
#include <string>
#include <unistd.h>
#include <vector>

#include "apps/args.h"
#include "apps/cli.h"
#include "base/errors.h"
#include "base/files.h"
#include "cpu_kernels/thread_pool.h"
#include "engine/model/gguf_model.h"
#include "engine/model/model_source.h"

namespace {

// "[=====>     ]  45%  1.2 / 2.6 GB" on one stderr line, redrawn; only
// where stderr is a terminal (a log or a test's captured output gets the
// final line alone).
void progress_bar(uint64_t done, uint64_t total) {
    if (!isatty(STDERR_FILENO)) return;
    const int width = 30;
    const double f = total ? double(done) / double(total) : 1.0;
    std::string bar(size_t(width), ' ');
    for (int i = 0; i < int(f * width); i++) bar[size_t(i)] = '=';
    if (f < 1.0) bar[size_t(int(f * width))] = '>';
    std::fprintf(stderr, "\rquantize: [%s] %3d%%  %.2f / %.2f GB", bar.c_str(), int(f * 100), done / 1e9, total / 1e9);
    if (done >= total) std::fputc('\n', stderr);
    std::fflush(stderr);
}

}  // namespace

int cli_quantize(const std::vector<std::string>& words) {
    Args args(words);
    ModelSource source = parse_model_flag(args, "quantize: ");
    const std::string type = args.required("--type");
    const std::string out = args.required("--out");
    GgufWriteOptions o;
    o.experts_only = args.flag("--experts-only");
    if (args.flag("--fast-scales")) o.search = QuantSearch::RANGE;
    const int threads = int(args.get_int("--threads", 0, 0, 1024));
    args.finish();
    std::optional<QuantMix> mix = quant_mix_parse(type);
    if (!mix) throw MoeError("--type: '" + type + "' is not one of f32, bf16, q8_0, q4_0, q4_k_m, q5_k_m");
    o.mix = *mix;
    file_check_output("--out", out);  // refused before any work

    auto t0 = std::chrono::steady_clock::now();
    ModelConfig config = model_source_config(source);
    const int n_threads = threads > 0 ? threads : physical_core_count();
    ModelWeights weights = model_source_weights(source, config, n_threads);
    o.threads = n_threads;
    o.name = model_source_id(source);
    o.extra_metadata = model_source_text_metadata(source, config);
    o.progress = progress_bar;
    gguf_model_write(out, config, weights, o);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "wrote %s (%s%s%s) in %.1f s\n", out.c_str(), quant_mix_name(o.mix),
                 o.experts_only ? ", experts only" : "", o.search == QuantSearch::RANGE ? ", fast scales" : "", secs);
    return 0;
}
