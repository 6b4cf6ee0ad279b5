// `moe-server calibrate` on the tiny model: writes a valid calibration file
// with nine points under $XDG_CACHE_HOME, reuses it on the next run unless
// --force (which replaces a planted file), writes --out as well, and fails
// cleanly on bad flags; the engine then loads the file calibrate wrote (one
// key function for both) and plans with its numbers. The engine's
// measuring (engine/devices/calibration.h) returns a complete record and the
// check passes of `bench latency` as data.
#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>

#include "cpu_kernels/thread_pool.h"
#include "engine/devices/calibration.h"
#include "engine/devices/calibration_key.h"
#include "engine/model/synth_model.h"
#include "engine/runtime/session.h"
#include "profiles/calibration.h"
#include "server/placement_text.h"
#include "test_support.h"

namespace fs = std::filesystem;

namespace {

// A time no expert of the tiny model takes: a planted file's points.
constexpr double PLANTED_MS = 1000.0;
// A planted CPU curve's time per expert run (no measurement fits exactly it).
constexpr double PLANTED_EXPERT_MS = 0.00123;

}  // namespace

TEST_CASE("calibrate writes, reuses and re-measures the cached calibration", "[calibrate][slow]") {
    fs::path cache = test_temp_dir("calibrate-cache");
    // The child inherits it. (ctest runs each test case in a process of its
    // own; run directly, later cases see this empty cache, which only
    // isolates them further.)
    setenv("XDG_CACHE_HOME", cache.c_str(), 1);
    std::string model = test_model_dir("tiny").string();
    // --reps: fewer sweeps than the default, for speed (hidden test flag).
    CommandResult r = moe({"calibrate", "--model", model, "--threads", "1", "--reps", "3"});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    fs::path dir = cache / "moe-server" / "calibration";
    REQUIRE(fs::is_directory(dir));
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(dir)) files.push_back(e.path());
    REQUIRE(files.size() == 1);
    Calibration c = calibration_read(files[0]);  // validates
    REQUIRE(files[0].filename() == calibration_key(c) + ".json");
    REQUIRE(c.cpu_points.size() == 9);
    REQUIRE(c.cpu_points.front().x == 1);
    REQUIRE(c.cpu_points.back().x == 256);
    REQUIRE(c.threads == 1);
    REQUIRE(c.dim == 64);
    REQUIRE(c.hidden_dim == 128);
    REQUIRE_FALSE(c.has_device);
    REQUIRE(c.read_gbs > 0);
    REQUIRE(r.out.find("roofline_ms") != std::string::npos);
    REQUIRE(r.out.find("wrote " + files[0].string()) != std::string::npos);

    // Same key: reused, not measured again; --out copies it.
    fs::path out = test_temp_dir("calibrate-out") / "cal.json";
    CommandResult again = moe({"calibrate", "--model", model, "--threads", "1", "--out", out.string()});
    INFO(again.out << again.err);
    REQUIRE(again.exit_code == 0);
    REQUIRE(again.out.find("reusing") != std::string::npos);
    REQUIRE(calibration_read(out).cpu_points[3].ms == c.cpu_points[3].ms);

    // --force measures again: plant a file whose CPU points no measurement of
    // the tiny expert comes near (1000 ms each); without --force it is reused,
    // with --force it is replaced by fresh measurements.
    Calibration planted = c;
    for (TimingPoint& p : planted.cpu_points) p.ms = PLANTED_MS;
    calibration_write(planted, files[0]);
    CommandResult reused = moe({"calibrate", "--model", model, "--threads", "1"});
    INFO(reused.out << reused.err);
    REQUIRE(reused.exit_code == 0);
    REQUIRE(calibration_read(files[0]).cpu_points[0].ms == PLANTED_MS);
    CommandResult forced = moe({"calibrate", "--model", model, "--threads", "1", "--reps", "3", "--force"});
    INFO(forced.out << forced.err);
    REQUIRE(forced.exit_code == 0);
    REQUIRE(forced.out.find("reusing") == std::string::npos);
    Calibration measured = calibration_read(files[0]);
    REQUIRE(measured.cpu_points.size() == 9);
    for (const TimingPoint& p : measured.cpu_points) REQUIRE(p.ms < PLANTED_MS);
}

TEST_CASE("calibrate: bad flags are one-line errors with exit code 2", "[calibrate]") {
    CommandResult none = moe({"calibrate"});
    REQUIRE(none.exit_code == 2);
    REQUIRE(none.err.find("--model is required") != std::string::npos);
    CommandResult isa = moe({"calibrate", "--model", test_model_dir("tiny").string(), "--cpu-isa", "sse9"});
    REQUIRE(isa.exit_code == 2);
    REQUIRE(isa.err.find("--cpu-isa") != std::string::npos);
    CommandResult missing = moe({"calibrate", "--model", "/nonexistent/model"});
    REQUIRE(missing.exit_code == 2);
    REQUIRE(missing.err.find("/nonexistent/model") != std::string::npos);
    // --out a pipe (as /dev/full would be for root): refused, not replaced.
    fs::path dir = test_temp_dir("calibrate-pipe");
    setenv("XDG_CACHE_HOME", dir.c_str(), 1);
    fs::path fifo = dir / "pipe";
    REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
    CommandResult pipe = moe({"calibrate", "--model", test_model_dir("tiny").string(), "--threads", "1", "--reps", "1",
                              "--out", fifo.string()});
    INFO(pipe.out << pipe.err);
    REQUIRE(pipe.exit_code == 2);
    REQUIRE(pipe.err.find(fifo.string() + ": exists and is not a regular file") != std::string::npos);
    REQUIRE(fs::is_fifo(fs::symlink_status(fifo)));
}

TEST_CASE("the engine loads the calibration that calibrate wrote", "[calibrate]") {
    // Both derive the key with engine_calibration_key; before, calibrate named
    // the GPU (when a CUDA device exists) and the engine "none", so with a GPU
    // the engine never found the file.
    fs::path cache = test_temp_dir("calibrate-engine-cache");
    setenv("XDG_CACHE_HOME", cache.c_str(), 1);
    const std::string model = test_model_dir("tiny").string();
    CommandResult r = moe({"calibrate", "--model", model, "--threads", "1", "--reps", "1"});
    INFO(r.out << r.err);
    REQUIRE(r.exit_code == 0);
    const size_t at = r.out.find("wrote ");
    REQUIRE(at != std::string::npos);
    const std::string written = r.out.substr(at + 6, r.out.find('\n', at) - at - 6);
    REQUIRE(fs::is_regular_file(written));

    SessionOptions o;
    o.threads = 1;
    o.ctx = 64;
    {
        Session engine(load_model({model, o.threads}), o);
        INFO(placement_warning(engine.placement()));
        REQUIRE(placement_warning(engine.placement()).empty());
        REQUIRE(engine.placement().note.warning == PlacementWarning::NONE);
        REQUIRE(engine.placement().latency.cpu == CpuCurveSource::CALIBRATION);
        REQUIRE(engine.placement().latency.calibration == written);
        REQUIRE(placement_latency_source(engine.placement()) == "CPU: " + written);
    }
    // The dry run's planner uses it too, instead of the quick probe.
    o.device.emulate_gpu_expert_share = 0.5;
    {
        Session emulated(load_model({model, o.threads}), o);
        REQUIRE(emulated.placement().latency.cpu == CpuCurveSource::CALIBRATION);
        REQUIRE(emulated.placement().latency.device == DeviceCurveSource::NOMINAL);
        REQUIRE(placement_latency_source(emulated.placement()).rfind("CPU: " + written + "; device:", 0) == 0);
    }

    // And it plans with the file's numbers, not just its name: with a CPU
    // curve of PLANTED_EXPERT_MS per expert run whatever its tokens (cheaper
    // than any copy to the nominal GPU, so every expert that is not
    // resident stays on the CPU), the predicted CPU time of a request is
    // that times its CPU runs.
    Calibration cal = calibration_read(written);
    cal.cpu = {PLANTED_EXPERT_MS, 0, 0, 0, 0, 0};
    calibration_write(cal, written);
    Session planned(load_model({model, o.threads}), o);
    GenerateRequest req;
    req.prompt = {1, 415, 2936, 9060, 285, 1142, 754, 28705};
    req.max_tokens = 8;
    req.sampling.temperature = 0;
    req.ignore_eos = true;
    planned.generate(req, [](const TokenEvent&) { return true; });
    ExecutionStats s = planned.execution_stats().last;
    const uint64_t cpu_runs = s.runs[int(ExpertSite::CPU)];
    REQUIRE(cpu_runs > 0);
    REQUIRE(s.predicted_cpu_ms == Approx(PLANTED_EXPERT_MS * double(cpu_runs)).epsilon(1e-9));

    // The synthetic tiny model has the same expert shape: the same file.
    CommandResult synth = moe({"calibrate", "--model", "synth:tiny", "--threads", "1"});
    INFO(synth.out << synth.err);
    REQUIRE(synth.exit_code == 0);
    REQUIRE(synth.out.find("reusing " + written) != std::string::npos);
}

TEST_CASE("calibration_measure and latency_check_measure return their results as data", "[calibrate]") {
    const ModelConfig c = synth_preset(SynthPreset::TINY);
    const ModelWeights w = synth_weights(c, 0, 1);
    ThreadPool pool(1);
    const std::vector<int> ns = calibration_token_counts();
    REQUIRE(ns.size() == 9);
    REQUIRE(ns.front() == 1);
    REQUIRE(ns.back() == 256);

    // CPU only (-1): complete and valid as written, under the engine's key.
    CalibrationResult r = calibration_measure(c, w, pool, -1, 1);
    const Calibration& cal = r.calibration;
    REQUIRE_NOTHROW(calibration_validate(cal, "measured"));
    REQUIRE(calibration_key(cal) == engine_calibration_key(c, weights_expert_dtypes(w), 1, -1));
    REQUIRE(cal.device_name == "none");
    REQUIRE(cal.cpu_points.size() == ns.size());
    for (size_t i = 0; i < ns.size(); i++) REQUIRE(cal.cpu_points[i].x == ns[i]);
    REQUIRE(cal.read_gbs > 0);
    REQUIRE(cal.expert_bytes > 0);
    REQUIRE(!cal.has_device);
    REQUIRE(!r.device_ceilings);

    LatencyCheck check = latency_check_measure(c, w, pool, 1);
    REQUIRE(check.ns == ns);
    REQUIRE(check.fit_points.size() == ns.size());
    REQUIRE(check.check_points.size() == ns.size());
    REQUIRE(check.independent_experts);  // tiny has more than one expert
    REQUIRE(check.ceiling.read_gbs > 0);
    REQUIRE(check.roofline.stream_ms > 0);
    REQUIRE(check.fit.ms(1) > 0);
}
