# agenthost-protocol: shell integration for bash, loaded with `bash --rcfile THIS -i`.
# It runs the user's own ~/.bashrc first, then reports each command to the host with
# OSC 633 sequences (which the host strips from the terminal's output):
#   E;<command line>;<nonce>  the command line, escaped
#   C;<nonce>                 the command starts
#   D;<exit code>;<nonce>     the command ended (before the next prompt)
#   P;Cwd=<path>;<nonce>      the working directory
# The nonce comes from the host in AHP_SHELL_NONCE; it is kept in an unexported
# variable, so a program run in the terminal cannot forge these.
__ahp_nonce=${AHP_SHELL_NONCE-}
unset AHP_SHELL_NONCE
if [ -r "$HOME/.bashrc" ]; then
    . "$HOME/.bashrc"
fi
if [ -n "$__ahp_nonce" ] && [ -z "${__ahp_installed-}" ]; then
    __ahp_installed=1
    __ahp_esc() {
        local s=$1
        s=${s//\\/\\\\}
        s=${s//;/\\x3b}
        s=${s//$'\n'/\\x0a}
        s=${s//$'\r'/\\x0d}
        s=${s//$'\e'/\\x1b}
        s=${s//$'\a'/\\x07}
        __ahp_r=$s
    }
    # expanded by PS0 (in a subshell) after a command line is read, before it runs;
    # PS0 is not shown for an empty line
    __ahp_preexec() {
        local line
        line=$(HISTTIMEFORMAT= builtin history 1)
        if [[ $line =~ ^\ *[0-9]+\*?\ \ (.*)$ ]]; then
            line=${BASH_REMATCH[1]}
        fi
        __ahp_esc "$line"
        builtin printf '\e]633;E;%s;%s\a\e]633;C;%s\a' "$__ahp_r" "$__ahp_nonce" "$__ahp_nonce"
    }
    __ahp_precmd() {
        local status=$?
        __ahp_esc "$PWD"
        builtin printf '\e]633;D;%s;%s\a\e]633;P;Cwd=%s;%s\a' "$status" "$__ahp_nonce" \
            "$__ahp_r" "$__ahp_nonce"
        return $status
    }
    PS0='$(__ahp_preexec)'"${PS0-}"
    if (( BASH_VERSINFO[0] > 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] >= 1) )); then
        PROMPT_COMMAND=(__ahp_precmd "${PROMPT_COMMAND[@]}")
    else
        PROMPT_COMMAND="__ahp_precmd${PROMPT_COMMAND:+;$PROMPT_COMMAND}"
    fi
fi
