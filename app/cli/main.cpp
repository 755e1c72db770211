// moekit: the command-line tool. Subcommands live in app/cli/<name>.cpp and register themselves.
#include <algorithm>
#include <cstdio>
#include <exception>

#include "cli/command.hpp"
#include "moekit/core/error.hpp"

namespace moekit::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

bool register_command(std::string name, std::string help, std::function<void(CLI::App&)> setup) {
  command_registry().push_back({std::move(name), std::move(help), std::move(setup)});
  return true;
}

}  // namespace moekit::cli

int main(int argc, char** argv) {
  CLI::App app{"moekit: Mixture-of-Experts layers, fast, with quantized experts"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "moekit 0.1.0");
  auto commands = moekit::cli::command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  for (const auto& c : commands) {
    CLI::App* sub = app.add_subcommand(c.name, c.help);
    c.setup(*sub);
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const moekit::Error& e) {
    std::fprintf(stderr, "moekit: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "moekit: internal error: %s\n", e.what());
    return 2;
  }
  return 0;
}
