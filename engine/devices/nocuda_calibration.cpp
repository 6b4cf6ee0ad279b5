// The device side of a calibration in a build without CUDA (see
// calibration.h): there is no device to measure. Compiled only without CUDA;
// cuda_calibration.cpp is its twin with.
#include "engine/devices/calibration.h"

std::optional<GpuCeilings> calibration_measure_device(Calibration&, const ExpertWeights&, int, int) {
    return std::nullopt;
}

void calibration_measure_side_by_side(Calibration&, const ModelConfig&, const std::vector<ExpertWeights>&, ThreadPool&,
                                      int) {}
