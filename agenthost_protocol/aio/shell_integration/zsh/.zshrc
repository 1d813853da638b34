# agenthost-protocol: shell integration for zsh (see bash.sh for the sequences).
__ahp_nonce=${AHP_SHELL_NONCE-}
unset AHP_SHELL_NONCE
ZDOTDIR=$__ahp_user_zdotdir
if [[ -n ${AHP_USER_ZDOTDIR-} ]]; then
    unset AHP_USER_ZDOTDIR
elif [[ $ZDOTDIR == $HOME ]]; then
    unset ZDOTDIR
fi
unset __ahp_zdotdir __ahp_user_zdotdir
[[ -r ${ZDOTDIR:-$HOME}/.zshrc ]] && . ${ZDOTDIR:-$HOME}/.zshrc
if [[ -n $__ahp_nonce && -z ${__ahp_installed-} ]]; then
    __ahp_installed=1
    __ahp_esc() {
        local s=$1
        s=${s//\\/\\\\}
        s=${s//;/\\x3b}
        s=${s//$'\n'/\\x0a}
        s=${s//$'\r'/\\x0d}
        s=${s//$'\e'/\\x1b}
        s=${s//$'\a'/\\x07}
        REPLY=$s
    }
    __ahp_preexec() {
        __ahp_esc "$1"
        builtin print -rn -- $'\e]633;E;'"$REPLY;$__ahp_nonce"$'\a\e]633;C;'"$__ahp_nonce"$'\a'
    }
    __ahp_precmd() {
        local st=$?
        __ahp_esc "$PWD"
        builtin print -rn -- $'\e]633;D;'"$st;$__ahp_nonce"$'\a\e]633;P;Cwd='"$REPLY;$__ahp_nonce"$'\a'
        return $st
    }
    precmd_functions=(__ahp_precmd $precmd_functions)
    preexec_functions+=(__ahp_preexec)
fi
