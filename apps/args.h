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
    // Numbers: fallback when the flag is absent; MoeError naming the flag for
    // anything but a whole number (get_int) or a finite number (get_double)
    // in [min, max]: no NaN, infinity, overflow or trailing text.
    long get_int(const std::string& name, long fallback, long min, long max);
    double get_double(const std::string& name, double fallback, double min, double max);
    // The syntax checks of get_int and get_double for a value the caller
    // took apart itself (an item of a list, a number with a unit): nullopt
    // for anything else.
    static std::optional<long> integer(const std::string& text);
    static std::optional<double> number(const std::string& text);
    bool flag(const std::string& name);  // a switch without a value
    // Whether the flag is given (as --name or --name=value), without using it.
    bool has(const std::string& name) const;
    // Throws for the first unused word (unknown flag or stray argument).
    void finish() const;

private:
    std::vector<std::string> words_;
    std::vector<bool> used_;
};
