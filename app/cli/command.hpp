// The CLI's subcommand registry: each app/cli/<name>.cpp registers one subcommand with
//   MOEKIT_REGISTER_COMMAND(run, "Run one MoE layer and check it", setup_run);
// where setup_run(CLI::App& sub) adds its options and its callback (sub.callback(...)).
// Callbacks report failures by throwing: moekit::Error (exit 1: bad input, a failed check) or
// app::EnvironmentError (exit 3: no GPU, no CUDA build); main() prints the message and maps it
// (app/run/exit_status.hpp has the whole contract).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <string>
#include <vector>

namespace moekit::cli {

struct Command {
  std::string name;
  std::string help;
  std::function<void(CLI::App&)> setup;
};

std::vector<Command>& command_registry();
bool register_command(std::string name, std::string help, std::function<void(CLI::App&)> setup);

}  // namespace moekit::cli

#define MOEKIT_REGISTER_COMMAND(name, help, setup) \
  static const bool moekit_registered_##name = ::moekit::cli::register_command(#name, help, setup)
