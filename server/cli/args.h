// Command-line flag parsing shared by every subcommand: "--name value" and
// "--name=value" pairs plus boolean switches. Each getter consumes its flag;
// finish() rejects anything left over, so a misspelt flag is an error, not a
// silent default. Errors are MoeError naming the flag and the bad value.
#pragma once
#include <optional>
#include <string>
#include <vector>

class Args {
public:
    // args: the words after the subcommand.
    explicit Args(std::vector<std::string> args);

    std::optional<std::string> get(const std::string& name);
    std::string get(const std::string& name, const std::string& fallback);
    // A flag that must be given: MoeError "<context><name> is required" when
    // absent (context: e.g. "calibrate: ", or empty).
    std::string required(const std::string& name, const std::string& context = "");
    // Every value of a flag that may repeat (--stop a --stop b), in order.
    std::vector<std::string> get_all(const std::string& name);
    long get_int(const std::string& name, long fallback, long min, long max);
    double get_double(const std::string& name, double fallback, double min, double max);
    bool flag(const std::string& name);  // a switch without a value
    // Throws for the first unused word (unknown flag or stray argument).
    void finish() const;

private:
    std::vector<std::string> words_;
    std::vector<bool> used_;
};
