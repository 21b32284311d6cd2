//! A hundred small script tests, as a user's suite would have them: what the guide's
//! figure for a suite of 100 script tests on 2 cores measures
//! (`cargo test -p lockscript-harness --test script_suite`).

use lockscript_test::fixtures::bump;

macro_rules! script_tests {
    ($($name:ident = $by:expr;)*) => {$(
        #[lockscript_test::test]
        fn $name(conn: &mut redis::Connection) {
            assert_eq!(bump("counter", $by).invoke(conn).unwrap(), $by);
            assert_eq!(bump("counter", 1).invoke(conn).unwrap(), $by + 1);
        }
    )*};
}

script_tests! {
    t000 = 0; t001 = 1; t002 = 2; t003 = 3; t004 = 4; t005 = 5; t006 = 6; t007 = 7; t008 = 8; t009 = 9;
    t010 = 10; t011 = 11; t012 = 12; t013 = 13; t014 = 14; t015 = 15; t016 = 16; t017 = 17; t018 = 18; t019 = 19;
    t020 = 20; t021 = 21; t022 = 22; t023 = 23; t024 = 24; t025 = 25; t026 = 26; t027 = 27; t028 = 28; t029 = 29;
    t030 = 30; t031 = 31; t032 = 32; t033 = 33; t034 = 34; t035 = 35; t036 = 36; t037 = 37; t038 = 38; t039 = 39;
    t040 = 40; t041 = 41; t042 = 42; t043 = 43; t044 = 44; t045 = 45; t046 = 46; t047 = 47; t048 = 48; t049 = 49;
    t050 = 50; t051 = 51; t052 = 52; t053 = 53; t054 = 54; t055 = 55; t056 = 56; t057 = 57; t058 = 58; t059 = 59;
    t060 = 60; t061 = 61; t062 = 62; t063 = 63; t064 = 64; t065 = 65; t066 = 66; t067 = 67; t068 = 68; t069 = 69;
    t070 = 70; t071 = 71; t072 = 72; t073 = 73; t074 = 74; t075 = 75; t076 = 76; t077 = 77; t078 = 78; t079 = 79;
    t080 = 80; t081 = 81; t082 = 82; t083 = 83; t084 = 84; t085 = 85; t086 = 86; t087 = 87; t088 = 88; t089 = 89;
    t090 = 90; t091 = 91; t092 = 92; t093 = 93; t094 = 94; t095 = 95; t096 = 96; t097 = 97; t098 = 98; t099 = 99;
}
