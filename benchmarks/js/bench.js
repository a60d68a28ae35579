'use strict';
/*
 * JS reference side of the futoin_anyio benchmarks.
 *
 * Usage: node --expose-gc bench.js '<json config>'
 *   config = {"scenarios": {"seq": {"sizes": [1000000]}, ...}, "repeat": 3, "budget": 5}
 * Prints one JSON object per line: {"scenario", "n", "value", "unit", "seconds"}.
 * A scenario whose result is wrong throws: the process exits non-zero.
 *
 * Each scenario mirrors benchmarks/_futoin.py: same N, same work, same checks.
 */

const $as = require( 'futoin-asyncsteps' );
const callImmediate = $as.AsyncTool.callImmediate;
const { performance } = require( 'perf_hooks' );

class BenchError extends Error {}

const check = ( cond, msg ) => {
    if ( !cond ) {
        throw new BenchError( msg );
    }
};

const tick = () => new Promise( ( resolve ) => setImmediate( resolve ) );

const scenarios = {
    async seq( n ) {
        let count = 0;
        const body = ( as, i ) => {
            count += 1;
        };
        const t0 = performance.now();

        await $as().add( ( as ) => as.repeat( n, body ) ).promise();
        const dt = performance.now() - t0;

        check( count === n, `seq: ${count} != ${n}` );
        return [ n / dt * 1e3, 'steps/s', dt ];
    },

    async chain( n ) {
        const t0 = performance.now();
        const root = $as();
        const step = ( as, v ) => as.success( v + 1 );

        root.add( ( as ) => as.success( 0 ) );

        for ( let i = 0; i < n; ++i ) {
            root.add( step );
        }

        const res = await root.promise();
        const dt = performance.now() - t0;

        check( res === n, `chain: ${res} != ${n}` );
        return [ n / dt * 1e3, 'steps/s', dt ];
    },

    async instances( n ) {
        let done = 0;
        let finish;
        const all_done = new Promise( ( resolve ) => {
            finish = resolve;
        } );
        const step1 = ( as ) => as.success( 1 );
        const step2 = ( as, v ) => {
            done += v;

            if ( done === n ) {
                finish();
            }
        };
        const t0 = performance.now();

        for ( let i = 0; i < n; ++i ) {
            $as().add( step1 ).add( step2 ).execute();
        }

        await all_done;
        const dt = performance.now() - t0;

        check( done === n, `instances: ${done} != ${n}` );
        return [ n / dt * 1e3, 'roots/s', dt ];
    },

    async parallel( n ) {
        let count = 0;
        let after = false;
        const branch = ( as ) => {
            as.waitExternal();
            callImmediate( () => {
                count += 1;
                as.success();
            } );
        };
        const t0 = performance.now();

        await $as()
            .add( ( as ) => {
                const p = as.parallel();

                for ( let i = 0; i < n; ++i ) {
                    p.add( branch );
                }
            } )
            .add( ( as ) => {
                after = true;
            } )
            .promise();
        const dt = performance.now() - t0;

        check( count === n && after, `parallel: ${count} != ${n} or no step after` );
        return [ n / dt * 1e3, 'branches/s', dt ];
    },

    async mutex( n ) {
        const mtx = new $as.Mutex( 1 );
        let inside = 0;
        let max_inside = 0;
        let done = 0;
        let finish;
        const all_done = new Promise( ( resolve ) => {
            finish = resolve;
        } );
        const crit = ( as ) => {
            inside += 1;
            max_inside = Math.max( max_inside, inside );
            as.waitExternal();
            callImmediate( () => {
                inside -= 1;
                as.success();
            } );
        };
        const root_step = ( as ) => as.sync( mtx, crit );
        const last = ( as ) => {
            done += 1;

            if ( done === n ) {
                finish();
            }
        };
        const t0 = performance.now();

        for ( let i = 0; i < n; ++i ) {
            $as().add( root_step ).add( last ).execute();
        }

        await all_done;
        const dt = performance.now() - t0;

        check( done === n, `mutex: ${done} != ${n}` );
        check( max_inside === 1, `mutex: max inside ${max_inside} != 1` );
        check( inside === 0, `mutex: ${inside} still inside` );
        return [ n / dt * 1e3, 'roots/s', dt ];
    },

    async errors( n ) {
        let recovered = 0;
        const sub_sub = ( as ) => as.error( 'BenchError', 'boom' );
        const sub = ( as ) => {
            as.add( sub_sub );
        };
        const onerror = ( as, err ) => {
            if ( err === 'BenchError' ) {
                recovered += 1;
                as.success();
            }
        };
        const body = ( as, i ) => {
            as.add( sub, onerror );
        };
        const t0 = performance.now();

        await $as().add( ( as ) => as.repeat( n, body ) ).promise();
        const dt = performance.now() - t0;

        check( recovered === n, `errors: ${recovered} != ${n}` );
        return [ n / dt * 1e3, 'errors/s', dt ];
    },

    async waiting_mem( n ) {
        check( typeof global.gc === 'function', 'waiting_mem needs node --expose-gc' );
        const waiting = [];
        let done = 0;
        const wait_step = ( as ) => {
            as.waitExternal();
            waiting.push( as );
        };
        const last = ( as ) => {
            done += 1;
        };

        global.gc();
        const before = process.memoryUsage().heapUsed;

        for ( let i = 0; i < n; ++i ) {
            $as().add( wait_step ).add( last ).execute();
        }

        while ( waiting.length < n ) {
            await tick();
        }

        global.gc();
        const after = process.memoryUsage().heapUsed;

        for ( const as of waiting ) {
            as.success();
        }

        while ( done < n ) {
            await tick();
        }

        check( done === n, `waiting_mem: ${done} != ${n}` );
        return [ ( after - before ) / n, 'B/root', 0 ];
    },
};

const main = async () => {
    const config = JSON.parse( process.argv[2] );
    const repeat = config.repeat || 1;
    const budget = config.budget || 5;

    for ( const [ name, params ] of Object.entries( config.scenarios ) ) {
        const func = scenarios[name];
        const sizes = params.sizes || [ params.n ];

        for ( const n of sizes ) {
            if ( !func ) {
                console.log( JSON.stringify( {
                    scenario: name, n, na: 'no binary interface in the JS reference',
                } ) );
                continue;
            }

            let best = null;
            let spent = 0;

            // best of up to `repeat` runs, stopping once `budget` seconds are spent
            for ( let r = 0; r < repeat && spent < budget; ++r ) {
                const [ value, unit, dt ] = await func( n );
                const lower_better = unit === 'B/root';

                spent += dt / 1e3;

                if ( best === null ||
                     ( lower_better ? value < best.value : value > best.value ) ) {
                    best = { scenario: name, n, value, unit, seconds: dt / 1e3 };
                }
            }

            console.log( JSON.stringify( best ) );
        }
    }
};

main().catch( ( e ) => {
    console.error( e && e.stack || e );
    process.exit( 1 );
} );
