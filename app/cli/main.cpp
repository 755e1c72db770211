// moekit: the command-line tool. Subcommands live in app/cli/<name>.cpp and register themselves.
// main() owns the exit-code contract (app/run/exit_status.hpp): every way a command can end maps
// to 0 / 1 / 2 / 3 / 4 (or 128 + signal when interrupted), with one message on stderr.
#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include "cli/command.hpp"
#include "cli/interrupt.hpp"
#include "moekit/core/error.hpp"
#include "run/closest_name.hpp"
#include "run/exit_status.hpp"

namespace moekit::cli {

std::vector<Command>& command_registry() {
  static std::vector<Command> commands;
  return commands;
}

bool register_command(std::string name, std::string help, std::function<void(CLI::App&)> setup) {
  command_registry().push_back({std::move(name), std::move(help), std::move(setup)});
  return true;
}

namespace {

using app::ExitCode;

int report(ExitCode code, const std::string& message) {
  const char* kind = code == app::kExitUsage         ? "usage error"
                     : code == app::kExitEnvironment ? "environment error"
                     : code == app::kExitInternal    ? "internal error"
                                                     : "error";
  std::fprintf(stderr, "moekit: %s: %s\n", kind, message.c_str());
  if (code == app::kExitUsage)
    std::fprintf(stderr, "Run 'moekit --help' or 'moekit SUBCOMMAND --help' for the options.\n");
  if (code == app::kExitInternal)
    std::fprintf(stderr, "This is a bug in moekit: please report it with the command line.\n");
  return code;
}

std::string joined(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ", ") + x;
  return s;
}

// The long option names of a command ("--tokens", ...), for suggestions.
std::vector<std::string> option_names(const CLI::App& command) {
  std::vector<std::string> names;
  for (const CLI::Option* o : command.get_options())
    for (const std::string& n : o->get_lnames()) names.push_back("--" + n);
  return names;
}

// The argument CLI11 did not expect (its message lists them after ": "): the first option among
// them, since a value after an unknown option is only unexpected because of it.
std::string first_extra(const CLI::ExtrasError& e) {
  const std::string what = e.what();
  const auto colon = what.find(": ");
  std::istringstream rest(colon == std::string::npos ? what : what.substr(colon + 2));
  std::string first, word;
  while (rest >> word) {
    if (word[0] == '-') return word;
    if (first.empty()) first = word;
  }
  return first;
}

// Where argv names a subcommand: its index, or 0 when there is none.
int subcommand_index(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (argv[i][0] != '-') return i;
  return 0;
}

int unknown_argument(const CLI::App& top, CLI::App* command, const CLI::ExtrasError& e, int argc,
                     char** argv) {
  const std::string extra = first_extra(e);
  // An unknown option before the subcommand is the top level's.
  int index = 0;
  for (int i = 1; i < argc && !index; ++i)
    if (extra == argv[i] || std::string(argv[i]).rfind(extra + "=", 0) == 0) index = i;
  if (index && index < subcommand_index(argc, argv)) command = nullptr;
  const std::string where = command ? "'moekit " + command->get_name() + "'" : "'moekit'";
  if (extra.empty() || extra[0] != '-')
    return report(app::kExitUsage, "unexpected argument '" + extra + "' for " + where);
  const std::vector<std::string> names = option_names(command ? *command : top);
  const std::string name = extra.substr(0, extra.find('='));
  std::string hint = app::did_you_mean(name, names);
  if (hint.empty()) hint = "; its options: " + joined(names);
  return report(app::kExitUsage, "unknown option '" + name + "' for " + where + hint);
}

}  // namespace

}  // namespace moekit::cli

int main(int argc, char** argv) {
  namespace app = moekit::app;
  moekit::cli::install_interrupt_handling();
  CLI::App top{"moekit: Mixture-of-Experts layers, fast, with quantized experts"};
  top.set_version_flag("--version", "moekit 0.1.0");
  top.footer(std::string(app::kExitCodeHelp) +
             "\nBackend override: --backend or the MOEKIT_BACKEND environment variable "
             "(`moekit info` lists this build's backends).");
  auto commands = moekit::cli::command_registry();
  std::sort(commands.begin(), commands.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::vector<std::string> names;
  for (const auto& c : commands) {
    CLI::App* sub = top.add_subcommand(c.name, c.help);
    c.setup(*sub);
    names.push_back(c.name);
  }

  // The subcommand is checked here so that a mistyped one is named (CLI11 would only say that
  // one is required).
  const int at = moekit::cli::subcommand_index(argc, argv);
  CLI::App* command = nullptr;
  if (at > 0) {
    const std::string given = argv[at];
    if (std::find(names.begin(), names.end(), given) == names.end())
      return moekit::cli::report(app::kExitUsage, "unknown subcommand '" + given + "'" +
                                                      app::did_you_mean(given, names) +
                                                      " (subcommands: " +
                                                      moekit::cli::joined(names) + ")");
    command = top.get_subcommand(given);
  } else {
    // No subcommand: an option other than --help / --version is unknown (CLI11 would only say
    // that a subcommand is required).
    for (int i = 1; i < argc; ++i) {
      const std::string a = argv[i];
      if (a == "-h" || a == "--help" || a == "--version") continue;
      return moekit::cli::report(app::kExitUsage, "unknown option '" + a.substr(0, a.find('=')) +
                                                      "' for 'moekit'" +
                                                      app::did_you_mean(a, {"--help", "--version"}) +
                                                      "; its options: --help, --version");
    }
    top.require_subcommand(1);
  }

  try {
    top.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return top.exit(e);
  } catch (const CLI::ExtrasError& e) {
    return moekit::cli::unknown_argument(top, command, e, argc, argv);
  } catch (const CLI::RequiredError& e) {
    if (!command)
      return moekit::cli::report(app::kExitUsage, "a subcommand is required: " +
                                                      moekit::cli::joined(names));
    return moekit::cli::report(app::kExitUsage,
                               "moekit " + command->get_name() + ": " + std::string(e.what()));
  } catch (const CLI::ValidationError& e) {  // a value out of range (int_options.hpp) or refused
    return moekit::cli::report(app::kExitBadInput, e.what());
  } catch (const CLI::ConversionError& e) {  // a value of the wrong type ("--tokens abc")
    return moekit::cli::report(app::kExitBadInput, e.what());
  } catch (const CLI::ParseError& e) {  // a flag without its value, too many values, ...
    return moekit::cli::report(app::kExitUsage, e.what());
  } catch (const app::EnvironmentError& e) {
    return moekit::cli::report(app::kExitEnvironment, e.what());
  } catch (const moekit::Error& e) {
    return moekit::cli::report(app::kExitBadInput, e.what());
  } catch (const std::bad_alloc&) {
    return moekit::cli::report(app::kExitEnvironment,
                               "out of host memory (an allocation failed after the up-front "
                               "memory check passed: other processes may be using it)");
  } catch (const std::filesystem::filesystem_error& e) {  // a path the command could not use
    return moekit::cli::report(app::kExitBadInput, e.what());
  } catch (const std::exception& e) {
    return moekit::cli::report(app::kExitInternal, e.what());
  }
  std::fflush(stdout);
  if (std::ferror(stdout))
    return moekit::cli::report(app::kExitEnvironment,
                               std::string("writing to standard output failed: ") +
                                   std::strerror(errno));
  return app::kExitSuccess;
}
