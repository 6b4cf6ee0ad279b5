// The calibration file: what `moe-server calibrate` measured on this machine
// for one expert shape, as plain numbers. Its schema, the cache key and file
// name, read / write / validate and the cache lookup live here. Its fitted
// curves are latency_curve.h's; fitting them and planning with them belong
// to placement/, which depends on this module, never the reverse. Never runs
// a model or measures anything.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "profiles/latency_curve.h"

constexpr int CALIBRATION_VERSION = 1;

struct Calibration {
    int version = CALIBRATION_VERSION;
    // The key: what the figures depend on.
    std::string cpu_name;     // CPU model name (CPUID brand string)
    std::string isa;          // active CPU kernel path ("avx2", "avx512bf16", ...)
    int threads = 0;          // CPU threads the expert kernels ran on
    std::string device_name;  // accelerator name, "none" without one
    int dim = 0;              // expert input/output width (hidden_size)
    int hidden_dim = 0;       // expert inner width (intermediate_size)
    std::string dtype;        // expert weight type ("bf16")

    // The machine's ceiling, measured in the same run, and the expert's
    // cost: the roofline the fit is checked against.
    double read_gbs = 0;                // streaming read bandwidth, all threads
    double fma_gflops = 0;              // fp32 FMA peak, all threads
    double expert_bytes = 0;            // weight bytes of one expert (w1 + w3 + w2)
    double expert_flops_per_token = 0;  // FLOPs of one expert for one token

    // CPU expert FFN: measured median times and the fitted curve.
    std::vector<TimingPoint> cpu_points;
    LatencyCurve cpu;

    // Device side, only when has_device: expert compute on the device and
    // host-to-device copies of expert weights.
    bool has_device = false;
    std::vector<TimingPoint> device_points;
    LatencyCurve device;
    std::vector<TimingPoint> copy_points;
    CopyCurve copy;

    // Side by side, only with a device and only when measured (files of
    // earlier builds have none; the planner then prices both sides alone):
    // the CPU expert FFN while the copy stream streams expert weights to the
    // device, and the copies while the CPU runs experts on every thread
    // (placement/latency_model.h).
    bool has_side_by_side = false;
    std::vector<TimingPoint> cpu_beside_copies_points;
    LatencyCurve cpu_beside_copies;
    std::vector<TimingPoint> copy_beside_cpu_points;
    CopyCurve copy_beside_cpu;
};

// The cache key from plain values, e.g.
// "AMD-EPYC_avx512bf16_t2_none_1024x3584-bf16": every character outside
// [A-Za-z0-9.-] becomes '_' (runs collapse), so it is a file name as well.
std::string calibration_key(std::string_view cpu_name, std::string_view isa, int threads, std::string_view device,
                            int dim, int hidden_dim, std::string_view dtype = "bf16");
std::string calibration_key(const Calibration& c);

// $XDG_CACHE_HOME/moe-server/calibration (XDG_CACHE_HOME defaulting to
// $HOME/.cache); <dir>/<key>.json for one key.
std::filesystem::path calibration_cache_dir();
std::filesystem::path calibration_cache_path(std::string_view key);

// Throws MoeError "<source>: <field>: <what is wrong>" for a version
// other than CALIBRATION_VERSION, an empty key field, a negative or
// non-finite number, a point with x <= 0, ms <= 0 or a fractional token
// count, or fewer than two CPU points (and two device and copy points when
// has_device).
void calibration_validate(const Calibration& c, std::string_view source);

// Reads and validates a file: MoeError naming the file for a file that
// cannot be read, is not JSON, or misses / mistypes a field.
Calibration calibration_read(const std::filesystem::path& path);
// Validates, then writes (creating the folder); MoeError naming the file
// when it cannot be written.
void calibration_write(const Calibration& c, const std::filesystem::path& path);

// The cached calibration for a key (calibration_cache_path), or nothing when
// no file exists. A file that exists but does not validate, or whose key
// fields do not give this key, is a MoeError naming the file and the field;
// the layers that speak to the user add how to replace it (`calibrate
// --force`: server/placement_text.cpp, apps/).
std::optional<Calibration> calibration_find_cached(std::string_view key);
