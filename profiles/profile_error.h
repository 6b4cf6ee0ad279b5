// ProfileError: a popularity or calibration file that cannot be used (not
// JSON, wrong version, wrong fingerprint, wrong dimensions, bad counts). The
// message names the file and what is wrong; the CLI prints it as one line.
#pragma once
#include <stdexcept>
#include <string>

class ProfileError : public std::runtime_error {
public:
    explicit ProfileError(const std::string& what) : std::runtime_error(what) {}
};
