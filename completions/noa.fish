# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_noa_global_optspecs
    string join \n state-dir= session= format= limit= config= protect= no-reclaim preserve-messages= preserve-tokens= reserve-output= tokenizer= skip-bad-lines leaf= parent= q/quiet v/verbose h/help V/version
end

function __fish_noa_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_noa_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_noa_using_subcommand
    set -l cmd (__fish_noa_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c noa -n "__fish_noa_needs_command" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_needs_command" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_needs_command" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_needs_command" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_needs_command" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_needs_command" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_needs_command" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_needs_command" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_needs_command" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_needs_command" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_needs_command" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_needs_command" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_needs_command" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_needs_command" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_needs_command" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_needs_command" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_needs_command" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_needs_command" -f -a "project" -d 'Write this turn\'s view: the transcript as the model should see it'
complete -c noa -n "__fish_noa_needs_command" -f -a "apply" -d 'Apply the model\'s Compress call and print the panel to hand back'
complete -c noa -n "__fish_noa_needs_command" -f -a "materialize" -d 'Write the transcript with its compression baked in, to go on without noa'
complete -c noa -n "__fish_noa_needs_command" -f -a "ranges" -d 'Show what may be compressed right now, what may not, and why'
complete -c noa -n "__fish_noa_needs_command" -f -a "prompt" -d 'Print the resident system-prompt block, or the Compress tool definition'
complete -c noa -n "__fish_noa_needs_command" -f -a "rebuild" -d 'Rebuild the state from the transcript alone, replaying its Compress calls'
complete -c noa -n "__fish_noa_needs_command" -f -a "inspect" -d 'Show a session\'s blocks, stats, context breakdown and tier tree'
complete -c noa -n "__fish_noa_needs_command" -f -a "completions" -d 'Print a shell completion script, or the man page'
complete -c noa -n "__fish_noa_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c noa -n "__fish_noa_using_subcommand project" -s o -l output -d 'Write the view here (atomically) instead of stdout' -r -F
complete -c noa -n "__fish_noa_using_subcommand project" -l to -d 'Request format of the view [default: the transcript\'s own]' -r -f -a "chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
responses\t'OpenAI Responses input items'"
complete -c noa -n "__fish_noa_using_subcommand project" -l report -d 'Format of the one-line report on stderr' -r -f -a "text\t'One line for a person'
json\t'One JSON object'"
complete -c noa -n "__fish_noa_using_subcommand project" -l input-tokens -d 'The provider\'s input-token count for the last request (21000, 21k; empty: none known yet)' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l overflow-error -d 'The provider\'s error text when a request overflowed: noa learns the real window from it' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand project" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand project" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand project" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand project" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand project" -l dry-run -d 'Print the view but write no state: no new refs are kept'
complete -c noa -n "__fish_noa_using_subcommand project" -l nudge -d 'Nudge the model to compress this turn, whatever the pacing says ("compact now")'
complete -c noa -n "__fish_noa_using_subcommand project" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand project" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand project" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand project" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand project" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand project" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand apply" -l call-id -d 'Apply the Compress call with this tool-call id [default: the last one with no result yet]' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l args -d 'Take the Compress arguments from a file (or - for stdin) instead of the transcript' -r -F
complete -c noa -n "__fish_noa_using_subcommand apply" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand apply" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand apply" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand apply" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand apply" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand apply" -l json -d 'Print the panel and structured fields as one JSON object'
complete -c noa -n "__fish_noa_using_subcommand apply" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand apply" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand apply" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand apply" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand apply" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand apply" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand materialize" -s o -l output -d 'Write the transcript here (atomically) instead of stdout; an existing directory takes each transcript under its own file name (with --new-session, the name its host gives the new session\'s log)' -r -F
complete -c noa -n "__fish_noa_using_subcommand materialize" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand materialize" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand materialize" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand materialize" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand materialize" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand materialize" -l new-session -d 'Write the copy as a new session, with an id of its own, that Claude Code or Codex can resume beside the original'
complete -c noa -n "__fish_noa_using_subcommand materialize" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand materialize" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand materialize" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand materialize" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand materialize" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand materialize" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand ranges" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand ranges" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand ranges" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand ranges" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand ranges" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand ranges" -l json -d 'Print one JSON object instead of a table'
complete -c noa -n "__fish_noa_using_subcommand ranges" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand ranges" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand ranges" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand ranges" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand ranges" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand ranges" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand prompt" -l for -d 'Which provider\'s tools-array shape the definition takes' -r -f -a "chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
responses\t'OpenAI Responses input items'"
complete -c noa -n "__fish_noa_using_subcommand prompt" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand prompt" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand prompt" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand prompt" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand prompt" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand prompt" -l tool-schema -d 'Print the Compress tool definition (JSON) instead of the system block'
complete -c noa -n "__fish_noa_using_subcommand prompt" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand prompt" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand prompt" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand prompt" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand prompt" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand prompt" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l force -d 'Replace an existing state.json'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l check -d 'Compare the rebuilt state with the one on disk; exit 1 when they differ'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l json -d 'Print the report as one JSON object'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand rebuild" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand inspect" -l block -d 'Print one block\'s archive, the markdown of what it replaced (b1, b2, …)' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l svg -d 'Draw the context map as an SVG file' -r -F
complete -c noa -n "__fish_noa_using_subcommand inspect" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand inspect" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand inspect" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand inspect" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand inspect" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand inspect" -l json -d 'Print one JSON object instead of tables'
complete -c noa -n "__fish_noa_using_subcommand inspect" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand inspect" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand inspect" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand inspect" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand inspect" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand inspect" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand completions" -l state-dir -d 'Where sessions live, one folder each: DIR/SESSION/state.json [default: .noa beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand completions" -l session -d 'Session id, the state\'s folder name [default: the transcript\'s own id, else its file stem]' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l format -d 'The transcript\'s format, when detection guesses wrong' -r -f -a "auto\t'Detect from the first records'
chat\t'OpenAI Chat Completions messages'
anthropic\t'Anthropic Messages'
claude-code\t'Claude Code session log'
codex\t'Codex rollout'"
complete -c noa -n "__fish_noa_using_subcommand completions" -l limit -d 'The model\'s context window in tokens (200000, 200k, 1m); a window learned by --overflow-error caps it [default: 200000]' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l config -d 'Engine settings file [default: noa.toml or .noa/config.toml beside the transcript]' -r -F
complete -c noa -n "__fish_noa_using_subcommand completions" -l protect -d 'Never compress this tool\'s calls and results (`Name`, or `prefix*`); repeatable' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l preserve-messages -d 'Keep the last N messages out of compression [default: 5]' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l preserve-tokens -d 'Keep the last N tokens out of compression (5000, 5k) [default: 5000 on a window of 128K and up, a proportional share below]' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l reserve-output -d 'Room to keep free for the model\'s reply, in tokens (8192, 8k) [default: min(8192, window / 8)]' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l tokenizer -d 'How to count tokens: the quick estimate, or an exact BPE count [default: estimate]' -r -f -a "estimate\t'One token per four characters (one per CJK character); nothing to load'
o200k\t'Exact o200k_base counts (GPT-4o, GPT-4.1, GPT-5, o-series)'
cl100k\t'Exact cl100k_base counts (GPT-4, GPT-3.5)'"
complete -c noa -n "__fish_noa_using_subcommand completions" -l leaf -d 'Claude Code: read the conversation that ends at this record, not the newest (project -v names the one read)' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l parent -d 'A session to start from (its refs and blocks) when this one has no state yet; repeatable, nearest first' -r
complete -c noa -n "__fish_noa_using_subcommand completions" -l no-reclaim -d 'Leave dead tool outputs (reads of files changed since, outputs given again) for the model'
complete -c noa -n "__fish_noa_using_subcommand completions" -l skip-bad-lines -d 'Treat lines that are not valid JSON as warnings instead of errors'
complete -c noa -n "__fish_noa_using_subcommand completions" -s q -l quiet -d 'Print nothing on stderr but errors (no report, no warnings)'
complete -c noa -n "__fish_noa_using_subcommand completions" -s v -l verbose -d 'List every warning instead of a count; project also says why it nudged or not'
complete -c noa -n "__fish_noa_using_subcommand completions" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c noa -n "__fish_noa_using_subcommand completions" -s V -l version -d 'Print version'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "project" -d 'Write this turn\'s view: the transcript as the model should see it'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "apply" -d 'Apply the model\'s Compress call and print the panel to hand back'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "materialize" -d 'Write the transcript with its compression baked in, to go on without noa'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "ranges" -d 'Show what may be compressed right now, what may not, and why'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "prompt" -d 'Print the resident system-prompt block, or the Compress tool definition'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "rebuild" -d 'Rebuild the state from the transcript alone, replaying its Compress calls'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "inspect" -d 'Show a session\'s blocks, stats, context breakdown and tier tree'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "completions" -d 'Print a shell completion script, or the man page'
complete -c noa -n "__fish_noa_using_subcommand help; and not __fish_seen_subcommand_from project apply materialize ranges prompt rebuild inspect completions help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
